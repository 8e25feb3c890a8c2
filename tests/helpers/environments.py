"""Local packages and Python environments for the per-side environment tests: wheels written by hand (no
index, no network) and a head environment that sees this interpreter's packages plus its own."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

from perfgate.measure.packages import site_folders


def build_wheel(folder: Path, name: str, version: str, source: str) -> Path:
    """A pure-Python wheel of one module `name` (its code `source`), written into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}.py": source,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: perfgate-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    files[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return wheel


def head_environment(folder: Path, *wheels: Path) -> Path:
    """A virtual environment at `folder` that sees this interpreter's packages (perfgate, torch) behind its own,
    with `wheels` unpacked into its own: the head's environment of a project that installed them. Its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True, capture_output=True)
    python = folder / "bin" / "python"
    own = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    own.mkdir(parents=True, exist_ok=True)
    lines = "".join(f"import site; site.addsitedir({p!r})\n" for p in site_folders())
    (own / "_test_outer_packages.pth").write_text(lines)
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(own)
    assert sysconfig.get_paths()["purelib"] != str(own)
    return python
