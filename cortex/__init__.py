"""cortex: a git-native memory for AI coding assistants."""

from collections.abc import MutableMapping  # loaded by Python's own start: costs a hook nothing

__version__ = "0.1.0"

# The environment variables that give numpy's BLAS one thread: set by every command but the bulk ones
# (`cortex.__main__`) and by `cortex serve`, whose matrix-vector products a second thread spins on.
ONE_THREAD = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
CAPS_SET = "CORTEX_SET_THREADS"  # which of them cortex set itself (a person's own cap is never dropped)


def cap_threads(env: MutableMapping[str, str]) -> None:
    """One BLAS thread in `env` unless it says otherwise, naming the caps cortex set (with a parent's)."""
    ours = {name for name in ONE_THREAD if name not in env} | (set(env.get(CAPS_SET, "").split(",")) & set(ONE_THREAD))
    for name in ONE_THREAD:
        env.setdefault(name, "1")
    env[CAPS_SET] = ",".join(sorted(ours))


def uncap_threads(env: MutableMapping[str, str]) -> None:
    """Drop the caps cortex set (bulk work, such as filling vectors niced, uses every core)."""
    for name in env.pop(CAPS_SET, "").split(","):
        if name in ONE_THREAD:
            env.pop(name, None)
