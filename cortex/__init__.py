"""cortex: a git-native memory for AI coding assistants."""

__version__ = "0.1.0"

# The environment variables that give numpy's BLAS one thread: set by every command but the bulk ones
# (`cortex.__main__`) and by `cortex serve`, whose matrix-vector products a second thread spins on.
ONE_THREAD = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
