"""What the runs beyond memory (stream-beyond-memory.py, collections-beyond-memory.py) share:
padded values that name their index, a failure that stops the run, and each phase's rate."""
import sys
import time


def padded(i, size):
    """i written out and padded with dots to `size` bytes."""
    text = str(i).encode()
    return text + b"." * (size - len(text))


def failer(script):
    def fail(why):
        sys.exit(f"{script}: {why}")
    return fail


def phase(what, count, started, width=52):
    took = time.time() - started
    print(f"{what:<{width}} {count:>9} in {took:7.1f} s  {count / took:>10.0f} a second")
