import numpy as np, torch, torch.nn.functional as F, jitdl as jd, jitdl.numpy as jnp, warnings
warnings.simplefilter("ignore")
vals_f = np.array([-0.0, 0.0, -1.5, 2.0, np.nan, np.inf, -np.inf, 7.0, 6.0, -np.nan], np.float32)
def cmp(tag, want, got):
    want = want.numpy() if hasattr(want, "numpy") else np.asarray(want)
    got = np.asarray(got)
    same = want.dtype == got.dtype and want.shape == got.shape and np.array_equal(want, got, equal_nan=want.dtype.kind=='f') and (want.dtype.kind != 'f' or np.array_equal(np.signbit(want), np.signbit(got)))
    if not same: print(tag, "want", want.dtype, want.tolist(), "got", got.dtype, got.tolist())
for name in ("relu", "relu6"):
    tf = getattr(F, name); jf = getattr(jd.nn, name)
    for x in (vals_f, vals_f.astype(np.float64), vals_f.astype(np.float16), np.array([-3, 0, 3, 9], np.int32), np.array([-3, 0, 3, 9], np.int64), np.array([-3, 0, 3, 9], np.int8), np.array([0, 3, 9, 255], np.uint8)):
        try: want = tf(torch.from_numpy(x.copy()))
        except Exception as e: want = e
        try: got = jf(x)
        except Exception as e: got = e
        tag = f"{name} eager {x.dtype}"
        if isinstance(want, Exception) or isinstance(got, Exception):
            print(tag, "want", repr(want)[:80], "got", repr(got)[:150]); continue
        cmp(tag, want, got)
        # in a definition
        f = jd.compute(lambda X: jf(X))
        try: cmp(tag.replace("eager", "def"), want, f(x))
        except Exception as e: print(tag, "def ERR", e)
        @jd.compute
        def g(X):
            return jf(X * 1)
        try: cmp(tag.replace("eager", "def X*1"), want, g(x))
        except Exception as e: print(tag, "def*1 ERR", e)
    # bool
    xb = np.array([True, False])
    try: want = tf(torch.from_numpy(xb))
    except Exception as e: want = e
    try: got = jf(xb)
    except Exception as e: got = e
    print(name, "bool: torch", repr(want)[:60], "| jd", repr(got)[:150])
# inplace
x = vals_f.copy(); r = jd.nn.relu(x, inplace=True); print("inplace", x.tolist(), r is x)
