"""Our LTX-2 key checks and rendered configs against the real trainer's own schema.

``../shared/fixtures/ltx2/ltx_trainer_config.schema.json`` is ``LtxTrainerConfig.model_json_schema()``
of ltx-trainer 1.2.0: every key it takes, per section and per training strategy (``extra="forbid"``
everywhere). Its custom validators are not in it: the one that matters to keys converts the
deprecated ``validation.guidance_scale``/``stg_scale``/``stg_mode`` before the key check
(config.py:584-619), so the trainer accepts those three although the JSON schema does not list them.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from autotune.config.schema import ANY, BY, DEFAULT, find_unknown_keys, load_schema
from autotune.core.space import to_study_value
from autotune.trainers import get_adapter
from autotune.trainers.ltx2.adapter import OPTIMIZERS, QUANTIZATIONS, Ltx2Adapter
from tests.helpers import FAKES, shared_fixture

jsonschema = pytest.importorskip("jsonschema")

SHIPPED = ("t2v_lora.yaml", "t2v_lora_low_vram.yaml", "i2v_lora.yaml", "v2v_ic_lora.yaml")
#: Converted by a before-validator (config.py:584-619): accepted by the trainer, not in its JSON schema.
CONVERTED = {"guidance_scale", "stg_scale", "stg_mode"}
GAS = (1, 2, 4)
BATCHES = (1, 2, 4, 8)


@pytest.fixture(scope="module")
def trainer_schema() -> dict[str, Any]:
    path = shared_fixture("ltx2", "ltx_trainer_config.schema.json")
    return json.loads(path.read_text())  # type: ignore[no-any-return]


def _load(text: str) -> Any:
    """YAML 1.2, so ``1e-4`` is a number, as pydantic (lax) makes of PyYAML's string ``'1e-4'``."""
    return YAML(typ="safe", pure=True).load(StringIO(text))


# --- the key tree of the trainer's JSON schema, in our schema's notation -------------------------


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = defs[node["$ref"].rsplit("/", 1)[1]]
    return node


def _tree(node: dict[str, Any], defs: dict[str, Any]) -> Any:
    """None for a leaf, ``any`` for a free-form mapping, {key: tree} for a section, [tree] for a list
    of sections, {$by: key, value: tree, ...} for a union picked by one key's value."""
    node = _resolve(node, defs)
    options = [_resolve(o, defs) for o in node.get("anyOf", [])]
    objects = [o for o in options if o.get("type") == "object" or "properties" in o or "oneOf" in o]
    if objects and len(objects) == 1:
        return _tree(objects[0], defs)
    if "oneOf" in node:
        variants = [_resolve(o, defs) for o in node["oneOf"]]
        by = node.get("discriminator", {}).get("propertyName", "name")
        out: dict[str, Any] = {BY: by}
        for v in variants:
            out[v["properties"][by]["const"]] = _tree(v, defs)
        return out
    if node.get("type") == "array" and isinstance(node.get("items"), dict):
        item = _tree(node["items"], defs)
        return [item] if item is not None else None
    if "properties" in node:
        return {k: _tree(v, defs) for k, v in node["properties"].items()}
    if node.get("type") == "object" and node.get("additionalProperties") is True:
        return ANY
    return None


def _ours(spec: Any) -> Any:
    """Our schema in the same shape: ``$default`` dropped (JSON has no notion of it)."""
    if isinstance(spec, list):
        return [_ours(spec[0])] if spec else None
    if isinstance(spec, dict):
        return {k: _ours(v) for k, v in spec.items() if k != DEFAULT}
    return spec


def test_our_key_schema_is_the_trainers(trainer_schema: dict[str, Any]) -> None:
    theirs = _tree(trainer_schema, trainer_schema["$defs"])
    ours = _ours(load_schema())
    validation = dict(ours["validation"])
    assert {k for k in validation if k in CONVERTED} == CONVERTED
    ours["validation"] = {k: v for k, v in validation.items() if k not in CONVERTED}
    assert ours == theirs


def test_the_default_strategy_is_the_trainers() -> None:
    """A ``training_strategy`` without ``name`` is text_to_video (config.py:310-314, 788-791)."""
    assert load_schema()["training_strategy"][DEFAULT] == "text_to_video"


# --- every config we render is one the trainer takes ---------------------------------------------


def _adapter() -> Ltx2Adapter:
    adapter = get_adapter("ltx2", trainer_dir=FAKES / "ltx2-trainer")
    assert isinstance(adapter, Ltx2Adapter)
    return adapter


def _set(data: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    for part in parents:
        data = data.setdefault(part, {})
    data[last] = value


def _knob_grid() -> Iterator[dict[str, Any]]:
    for quant, opt, batch, ckpt in itertools.product(QUANTIZATIONS, OPTIMIZERS, BATCHES, (True, False)):
        yield {
            "quantization": to_study_value(None if quant == "none" else quant),
            "optimizer": opt,
            "batch_size": batch,
            "gradient_checkpointing": ckpt,
        }


def _errors(validator: Any, data: Any) -> list[str]:
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(data)]


@pytest.mark.parametrize("name", SHIPPED)
def test_every_rendered_config_is_valid_for_the_trainer(
    name: str, ltx2_fixtures: Path, trainer_schema: dict[str, Any], tmp_path: Path
) -> None:
    """4 shipped configs x every knob value x GA 1/2/4: a trial renders the baseline with the short-run
    recipe and the knobs' keys set (``knob_values``). One real render per GA gives the recipe; each
    knob combination is then set on it, and a real render of some checks that this is what render
    writes."""
    validator = jsonschema.Draft202012Validator(trainer_schema)
    adapter = _adapter()
    baseline = adapter.load_baseline(ltx2_fixtures / name)
    assert _errors(validator, _load(baseline.text)) == []
    checked = 0
    for ga in GAS:
        trial = tmp_path / f"ga{ga}"
        adapter.render(baseline, {}, gradient_accumulation_steps=ga, steps=60, trial_dir=trial)
        rendered = _load((trial / "config.yaml").read_text())
        assert rendered["checkpoints"]["no_resume"] is True
        for params in _knob_grid():
            data = json.loads(json.dumps(rendered))
            for key, value in adapter.knob_values(baseline, params, ga):
                _set(data, key, value)
            assert _errors(validator, data) == [], (name, params, ga)
            checked += 1
    assert checked == len(GAS) * len(QUANTIZATIONS) * len(OPTIMIZERS) * len(BATCHES) * 2
    # Spot checks that setting the knob keys is what render does.
    for params, ga in [
        (
            {
                "quantization": "int2-quanto",
                "optimizer": "adamw8bit",
                "batch_size": 8,
                "gradient_checkpointing": False,
            },
            4,
        ),
        ({"quantization": "none", "optimizer": "adamw", "batch_size": 2, "gradient_checkpointing": True}, 2),
    ]:
        trial = tmp_path / "spot"
        adapter.render(baseline, params, gradient_accumulation_steps=ga, steps=60, trial_dir=trial)
        really = _load((trial / "config.yaml").read_text())
        base = tmp_path / f"ga{ga}"
        expected = json.loads(json.dumps(_load((base / "config.yaml").read_text())))
        for key, value in adapter.knob_values(baseline, params, ga):
            _set(expected, key, value)
        expected["output_dir"] = really["output_dir"]
        assert really == expected
        assert _errors(validator, really) == []


# --- our key checks agree with the trainer's --------------------------------------------------------


def _sections(data: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Paths of every mapping in the config (sections, list items), the root included."""
    if isinstance(data, dict):
        yield path
        for k, v in data.items():
            if k not in ("scheduler_params", "timestep_sampling_params"):
                yield from _sections(v, (*path, k))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            yield from _sections(v, (*path, i))


def _at(data: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        data = data[part]
    return data


def _dump(data: Any) -> str:
    out = StringIO()
    YAML(typ="safe", pure=True).dump(data, out)
    return out.getvalue()


def _all_key_names(schema: dict[str, Any]) -> set[str]:
    names: set[str] = set()
    for d in schema["$defs"].values():
        names.update(d.get("properties", {}))
    return names | set(schema["properties"])


@pytest.mark.parametrize("name", SHIPPED)
def test_keys_it_refuses_we_refuse_and_keys_it_takes_we_take(
    name: str, ltx2_fixtures: Path, trainer_schema: dict[str, Any]
) -> None:
    """In every section of each shipped config, every key name the trainer knows anywhere (and a
    typo) that is not there yet is added at once: the keys the trainer's schema refuses there as
    extra are exactly the ones we report. Then the keys it takes there, each at its default value,
    are accepted by both."""
    defs = trainer_schema["$defs"]
    base = _load((ltx2_fixtures / name).read_text())
    names = _all_key_names(trainer_schema) | {"zz_not_a_key"} | CONVERTED
    refused = accepted = 0
    for path in _sections(base):
        node = _node_at(trainer_schema, base, path)
        section_validator = jsonschema.Draft202012Validator({"$defs": defs, **node})
        data = json.loads(json.dumps(base))
        added = sorted(names - set(_at(base, path)))
        _at(data, path).update(dict.fromkeys(added))
        theirs = _extra_keys(section_validator, _at(data, path))
        ours = {
            u.dotted.rsplit(".", 1)[-1]
            for u in find_unknown_keys(_dump(data), load_schema())
            if _under(u.dotted, path)
        }
        if path == ("validation",):
            assert theirs & CONVERTED == CONVERTED and not ours & CONVERTED  # converted before the check
            theirs -= CONVERTED
        assert ours == theirs, (name, path)
        refused += len(theirs)
        defaults = {k: v["default"] for k, v in node.get("properties", {}).items() if "default" in v}
        data = json.loads(json.dumps(base))
        _at(data, path).update({k: v for k, v in defaults.items() if k not in _at(base, path)})
        assert list(section_validator.iter_errors(_at(data, path))) == [], (name, path)
        assert find_unknown_keys(_dump(data), load_schema()) == [], (name, path)
        accepted += len(defaults)
    assert refused > 100 and accepted > 20


def _under(dotted: str, path: tuple[Any, ...]) -> bool:
    """``dotted`` names a key directly in the section at ``path``."""
    prefix = "".join(f"[{p}]." if isinstance(p, int) else f"{p}." for p in path).replace(".[", "[")
    rest = dotted[len(prefix) :] if dotted.startswith(prefix) else None
    return rest is not None and "." not in rest and "[" not in rest


def _extra_keys(validator: Any, section: dict[str, Any]) -> set[str]:
    """The keys the trainer's schema refuses in ``section`` as extra (not for their values)."""
    extra: set[str] = set()
    for error in validator.iter_errors(section):
        if error.validator == "additionalProperties" and not error.absolute_path:
            extra |= set(error.instance) - set(error.schema.get("properties", {}))
    return extra


def _node_at(schema: dict[str, Any], base: Any, path: tuple[Any, ...]) -> dict[str, Any]:
    """The trainer's schema for the section at ``path``, the union member its values pick."""
    defs = schema["$defs"]
    node: dict[str, Any] = schema
    data = base
    for part in path:
        data = data[part]
        node = _resolve(node, defs)
        node = node["items"] if isinstance(part, int) else node["properties"][part]
        node = _pick(node, defs, data)
    return _resolve(node, defs)


def _pick(node: dict[str, Any], defs: dict[str, Any], data: Any) -> dict[str, Any]:
    node = _resolve(node, defs)
    for union in ("anyOf", "oneOf"):
        for option in node.get(union, []) if isinstance(data, dict) else []:
            option = _resolve(option, defs)
            props = option.get("properties", {})
            if option.get("type") != "null" and all(
                "const" not in p or data.get(k, p.get("default")) == p["const"] for k, p in props.items()
            ):
                return option
    return node


# --- plan takes what the trainer takes ------------------------------------------------------------


@pytest.mark.parametrize(
    "extra",
    [
        "  reference_downscale_factor: 2\n",
        "  include_reference_in_output: true\n",
        "  guidance_scale: 4.0\n",
        "  stg_scale: 1.0\n  stg_mode: stg_v\n",
    ],
)
def test_autotune_plan_takes_the_validation_keys_the_trainer_converts(
    ltx2_fixtures: Path, tmp_path: Path, extra: str
) -> None:
    from autotune.plan.baseline import make_plan

    text = (
        (ltx2_fixtures / "t2v_lora.yaml").read_text().replace("\nvalidation:\n", "\nvalidation:\n" + extra, 1)
    )
    assert extra in text
    mine = tmp_path / "mine.yaml"
    mine.write_text(text)
    plan = make_plan(trainer_dir=_checkout(tmp_path, ltx2_fixtures), vram_gb=80, config=str(mine))
    assert plan.text is not None and extra in plan.text


@pytest.mark.parametrize(
    ("config", "key_line", "hint"),
    [
        ("i2v_lora.yaml", "  with_audio: true\n", "name: text_to_video, not of name: flexible"),
        (
            "v2v_ic_lora.yaml",
            "  reference_latents_dir: refs\n",
            "name: video_to_video, not of name: flexible",
        ),
    ],
)
def test_keys_of_another_strategy_are_refused(
    ltx2_fixtures: Path, config: str, key_line: str, hint: str
) -> None:
    text = (
        (ltx2_fixtures / config)
        .read_text()
        .replace("\ntraining_strategy:\n", "\ntraining_strategy:\n" + key_line, 1)
    )
    [unknown] = find_unknown_keys(text, load_schema(), config)
    assert hint in unknown.hint()


def test_a_legacy_strategy_takes_its_own_keys_and_not_the_flexible_ones() -> None:
    text = "training_strategy:\n  name: text_to_video\n  with_audio: true\n  video: {is_generated: true}\n"
    assert [u.dotted for u in find_unknown_keys(text, load_schema())] == ["training_strategy.video"]
    # Without a name the trainer takes text_to_video: a flexible key is refused too.
    assert [u.dotted for u in find_unknown_keys("training_strategy:\n  video: {}\n", load_schema())] == [
        "training_strategy.video"
    ]


def _checkout(tmp_path: Path, ltx2_fixtures: Path) -> Path:
    """A stand-in LTX-2 checkout whose shipped configs are the real ones, linked (never copied)."""
    pkg = tmp_path / "LTX-2" / "packages" / "ltx-trainer"
    (pkg / "configs").mkdir(parents=True, exist_ok=True)
    (pkg / "scripts").mkdir(exist_ok=True)
    (pkg / "scripts" / "train.py").write_text("# stand-in\n")
    for name in SHIPPED:
        if not (pkg / "configs" / name).exists():
            (pkg / "configs" / name).symlink_to(ltx2_fixtures / name)
    return tmp_path / "LTX-2"


@pytest.mark.parametrize("name", SHIPPED)
def test_plan_takes_every_shipped_config(name: str, ltx2_fixtures: Path, tmp_path: Path) -> None:
    from autotune.plan.baseline import make_plan

    plan = make_plan(
        trainer_dir=_checkout(tmp_path, ltx2_fixtures), vram_gb=80, config=name, output=tmp_path / "p.yaml"
    )
    assert plan.text is not None and plan.config_name == name
