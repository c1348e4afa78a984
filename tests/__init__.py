import sys

# pytest caches the test modules it rewrites for their asserts only where Python may write
# bytecode: under PYTHONDONTWRITEBYTECODE each worker of each run would rewrite them all anew,
# most of collecting. Here (imported before conftest.py) the suite's modules are cached in
# __pycache__/ whatever the variable says.
sys.dont_write_bytecode = False
