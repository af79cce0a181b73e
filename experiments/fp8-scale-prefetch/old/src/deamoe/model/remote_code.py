"""Make a checkpoint loadable by plain transformers: `trust_remote_code=True`, no deamoe needed.

`write_remote_code(folder)` copies the package's own model modules into a saved checkpoint, with
their `from deamoe.X import ...` lines turned into relative imports of the copied files, and adds
`auto_map` to its config.json.  Then, in any Python with torch and transformers,

    AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)

builds DeaMoEForCausalLM from the checkpoint's own files.  The files are copies of src/deamoe,
never a second implementation: the model code has one source.  Only the modules below may be
imported by the model; any other deamoe import in them stops the copy with an error (a test
loads a checkpoint with deamoe not importable).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]  # src/deamoe
# package module -> file name in the checkpoint (transformers' remote-code convention for the
# model file; the others keep a deamoe_ prefix so they cannot shadow anything)
MODULES = {
    "deamoe.errors": "deamoe_errors",
    "deamoe.paper": "deamoe_paper",  # Table 1's numbers, which deamoe.shapes turns into presets
    "deamoe.shapes": "deamoe_shapes",
    "deamoe.routing": "deamoe_routing",
    "deamoe.model.grouped": "deamoe_grouped",
    "deamoe.model.triton_ops": "deamoe_triton_ops",
    "deamoe.model.mix_rows": "deamoe_mix_rows",
    "deamoe.model.gather_sum": "deamoe_gather_sum",
    "deamoe.model.fast_ffn": "deamoe_fast_ffn",
    "deamoe.model.layers": "deamoe_layers",
    "deamoe.model.lm": "modeling_deamoe",
}
# Both classes from the one module: transformers loads each auto_map file with its own copy of
# the files it imports, so a config class from another file would build its FFN shapes from
# other class objects than the model's (isinstance checks would then fail).
AUTO_MAP = {
    "AutoConfig": "modeling_deamoe.DeaMoEConfig",
    "AutoModelForCausalLM": "modeling_deamoe.DeaMoEForCausalLM",
}
_IMPORT = re.compile(r"^(\s*)from (deamoe(?:\.\w+)*) import ", re.M)
_OTHER = re.compile(r"^\s*(?:import deamoe|from deamoe)\b", re.M)


def module_source(module: str) -> str:
    """The text of package module `module` with its deamoe imports made relative."""
    path = PACKAGE.joinpath(*module.split(".")[1:]).with_suffix(".py")
    text = path.read_text(encoding="utf-8")

    def relative(m: re.Match) -> str:
        target = m.group(2)
        if target not in MODULES:
            raise RuntimeError(f"{path}: imports {target}, which checkpoints do not carry "
                               f"(add it to deamoe.model.remote_code.MODULES)")
        return f"{m.group(1)}from .{MODULES[target]} import "

    text = _IMPORT.sub(relative, text)
    if _OTHER.search(text):
        raise RuntimeError(f"{path}: a deamoe import that checkpoints cannot carry")
    return text


def write_remote_code(folder: str | Path) -> None:
    """Copy the model modules into checkpoint `folder` and add auto_map to its config.json."""
    folder = Path(folder)
    header = "# Copied from the deamoe package (src/{}) into this checkpoint; do not edit.\n"
    for module, name in MODULES.items():
        rel = "/".join(module.split(".")[1:]) + ".py"
        (folder / f"{name}.py").write_text(header.format("deamoe/" + rel) + module_source(module),
                                           encoding="utf-8")
    config_path = folder / "config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["auto_map"] = dict(AUTO_MAP)
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
