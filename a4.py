from ah import *
import logging
rng=np.random.default_rng(6)
R=lambda *s, dt=np.float32: rng.standard_normal(s).astype(dt)
F=lambda a: a.astype(np.float64)
@jd.compute
def selfatt(X):
    s = jnp.matmul(X, jnp.swapaxes(X,-1,-2))
    e = jnp.exp(s - jnp.max(s, axis=-1, keepdims=True))
    return jnp.matmul(e / jnp.sum(e, axis=-1, keepdims=True), X)
@jd.compute
def kv_same(Q, K):
    s = jnp.matmul(Q, jnp.swapaxes(K,-1,-2))
    e = jnp.exp(s - jnp.max(s, axis=-1, keepdims=True))
    return jnp.matmul(e / jnp.sum(e, axis=-1, keepdims=True), K)
for dt in (np.float32, np.float64):
    for sh in [(2,40,16),(70,32),(33,16)]:
        x=R(*sh,dt=dt)*0.3
        s=F(x)@np.swapaxes(F(x),-1,-2)
        test(f"selfatt {sh} {dt.__name__}", selfatt,(x,), sm(s)@F(x))
        q=R(*sh,dt=dt)*0.3
        s=F(q)@np.swapaxes(F(x),-1,-2)
        test(f"kv_same {sh} {dt.__name__}", kv_same,(q,x), sm(s)@F(x))
