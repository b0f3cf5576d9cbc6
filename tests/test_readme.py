"""The README's Python snippets run as written (in order, as one script)."""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_readme_python_snippets_run(tmp_path):
    text = open(os.path.join(ROOT, "README.md")).read()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) >= 3
    script = tmp_path / "readme_snippets.py"     # kernels need a real source file
    script.write_text("\n".join(blocks))
    env = dict(os.environ, FLYDSL_CACHE_DIR=str(tmp_path / "cache"))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         env=env, timeout=600)
    assert out.returncode == 0, out.stderr
    assert ".entry vadd_kernel" in out.stdout          # the flydsl.compile(...) snippet
