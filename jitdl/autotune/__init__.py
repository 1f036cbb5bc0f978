"""Auto-tuning: search a schedule's knobs for the fastest verified kernel.

Three roles, as in AutoTVM, plus measurement and records:

    task        Task: one key to tune (graph, target, options, schedule function, config
                space, the call's arguments, the work per call); Measurement: one trial's
                outcome. Both travel to worker processes (cloudpickle).
    features    features of a lowered candidate (loop extents, annotations, bytes per
                cache level, arithmetic intensity): a fixed-length vector
    model       the cost model: XGBoost with a ranking objective (fit, predict)
    tuner       Tuner (next_batch, update) and its kinds: "xgb" (model + parallel
                simulated annealing + diversity-aware pick), "random", "grid", "ga"
    measure     runners: candidates built in parallel and timed one at a time in spawned
                worker processes; a crash, hang or wrong output is a failed trial;
                DaskRunner spreads the same work over a dask.distributed cluster
    records     the tuning records (sqlite under the per-user data directory,
                JITDL_TUNING_DB overrides): the best verified record of a key is applied
                to every later compile of it, in any process
    background  autotune="background": a worker thread that tunes keys after their first
                call and swaps a verified faster kernel into the dispatch table

This package is imported only when tuning starts or records are read: `import jitdl`
stays fast (xgboost, sqlite and multiprocessing load lazily).
"""
