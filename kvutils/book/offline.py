"""A Sphinx extension that makes the built book self-contained: it reads with no network.

Listed in `_config.yml` (`sphinx: extra_extensions`). It
- serves MathJax from the book's own `_static/mathjax/` instead of a CDN: MathJax 3 comes once
  from the npm registry (`npm pack`, checked against its published sha512) into the kvutils cache
  folder, and only the combined TeX/MathML component and its web fonts are copied into the site;
- drops the interactive-code (thebe) scripts from every page: the book is static, and those
  scripts would fetch thebe from unpkg.com the moment a reader pressed "run".
"""
from __future__ import annotations

import base64
import hashlib
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

MATHJAX_VERSION = "3.2.2"
# `npm view mathjax@3.2.2 dist.integrity`
MATHJAX_INTEGRITY = (
    "sha512-Bt+SSVU8eBG27zChVewOicYs7Xsdt40qm4+UpHyX7k0/O9NliPc+x77k1/FEsPsjKPZGJvtRZM1vO+geW0OhGw==")
MATHJAX_SCRIPT = "tex-mml-chtml.js"
# what a page needs: the combined component and the CHTML fonts it loads relative to itself
MATHJAX_FILES = ("es5/tex-mml-chtml.js", "es5/output/chtml/fonts/woff-v2/")


def mathjax_static_dir(cache: Path | None = None) -> Path:
    """The folder added to `html_static_path`; it holds `mathjax/tex-mml-chtml.js` and the fonts.
    Fetched on first use."""
    from kvutils.models.registry import cache_dir

    root = (cache or cache_dir()) / f"mathjax-{MATHJAX_VERSION}"
    if not (root / "mathjax" / MATHJAX_SCRIPT).is_file():
        _fetch_mathjax(root)
    return root


def _fetch_mathjax(root: Path) -> None:
    if shutil.which("npm") is None:
        raise RuntimeError("the book serves MathJax locally and fetches it once with npm, which is not "
                           "installed: apt-get install npm (or put mathjax-"
                           f"{MATHJAX_VERSION}/mathjax/ into the kvutils cache folder by hand)")
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["npm", "pack", f"mathjax@{MATHJAX_VERSION}", "--silent", "--pack-destination", tmp],
                       check=True, capture_output=True, timeout=300)
        tarball = Path(tmp) / f"mathjax-{MATHJAX_VERSION}.tgz"
        digest = "sha512-" + base64.b64encode(hashlib.sha512(tarball.read_bytes()).digest()).decode()
        if digest != MATHJAX_INTEGRITY:
            raise RuntimeError(f"mathjax-{MATHJAX_VERSION}.tgz: integrity {digest} is not the published "
                               f"{MATHJAX_INTEGRITY}")
        root.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=root.parent))
        with tarfile.open(tarball) as archive:
            for member in archive.getmembers():
                name = member.name.removeprefix("package/")
                if member.isfile() and any(name == f or (f.endswith("/") and name.startswith(f))
                                           for f in MATHJAX_FILES):
                    member.name = "mathjax/" + name.removeprefix("es5/")
                    archive.extract(member, staging, filter="data")
    shutil.rmtree(root, ignore_errors=True)
    staging.replace(root)  # whole folder at once: a fetch interrupted half-way leaves no partial copy


def _use_local_mathjax(app, config) -> None:
    config.html_static_path = [*config.html_static_path, str(mathjax_static_dir())]
    config.mathjax_path = f"mathjax/{MATHJAX_SCRIPT}"


def _drop_thebe(app, pagename, templatename, context, doctree) -> None:
    scripts = context.get("script_files")
    if scripts is None:
        return
    context["script_files"] = [
        s for s in scripts
        if "thebe" not in str(getattr(s, "filename", s) or "")
        and "THEBE" not in str(getattr(s, "attributes", {}).get("body", ""))]
    context["css_files"] = [c for c in context.get("css_files", [])
                            if "thebe" not in str(getattr(c, "filename", c))]


def _drop_thebe_config(app, doctree, docname) -> None:
    """sphinx-thebe writes its binder settings into every page's body; a static book has none."""
    from docutils import nodes

    for node in list(doctree.findall(nodes.raw)):
        if "x-thebe-config" in node.astext() or node.astext().strip().startswith("<script>kernelName"):
            node.parent.remove(node)


def setup(app):
    app.connect("config-inited", _use_local_mathjax)
    app.connect("doctree-resolved", _drop_thebe_config, priority=900)  # after sphinx-thebe (500)
    app.connect("html-page-context", _drop_thebe)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
