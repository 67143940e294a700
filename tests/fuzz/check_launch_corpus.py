"""The committed launch corpus is what make_launch_corpus.py writes, and
the generator's own check (a valid seed for every kind of the table) holds.
Run in the dev stage: nothing else runs the generator, so a kind added
without its seed went unnoticed (quant_int8_given_max, repack_gguf_int4)."""
import filecmp
import os
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
committed = os.path.join(here, "corpus_launch")
with tempfile.TemporaryDirectory() as out:
    subprocess.run([sys.executable, os.path.join(here, "make_launch_corpus.py"), out], check=True)
    names = sorted(os.listdir(out))
    stale = [n for n in names if not os.path.isfile(os.path.join(committed, n))
             or not filecmp.cmp(os.path.join(out, n), os.path.join(committed, n), shallow=False)]
if stale:
    print("tests/fuzz/corpus_launch is not what make_launch_corpus.py writes for: " + ", ".join(stale) +
          " (run it and commit the files)")
    sys.exit(1)
print("corpus_launch: %d seeds, as make_launch_corpus.py writes them" % len(names))
