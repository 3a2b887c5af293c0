"""An example tdbench plug-in (docs/plugins.md): ``example-gaussians`` (a problem) and ``example-is`` (a method).

Nothing here registers anything on import: the entry points in ``pyproject.toml`` name the two classes, and
tdbench registers them under the entry points' names when it loads its plug-ins.
"""
