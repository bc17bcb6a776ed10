"""docs/recipes/watched/: each TF2 recipe as its user writes it, plus at most 3 lines.

A watched twin is the plain training script with the lines marked `# gradscope`
added (`# gradscope, was: <line>` marks a line that replaces `<line>`): the
import, the recorder and `@rec.watch`. It must differ from the plain script by
at most 3 lines (counted with difflib), run without a tb_gradscope warning, and
record the tables the explicit recipe (docs/recipes/<name>.py) records on the
same seeds, to float tolerance.
"""

from __future__ import annotations

import difflib
import pathlib
import re
import runpy
import sys
import warnings
from unittest import mock

import numpy as np
import pytest

from tests.support.record_fixtures import read_records

RECIPES = pathlib.Path(__file__).resolve().parents[3] / "docs" / "recipes"
WATCHED = RECIPES / "watched"
DOC_BLOCK = re.compile(r"<!-- watched: (\w+) -->\n```python\n(.*?)\n```", re.S)
MAX_CHANGED = 3
MARK = re.compile(r"\s*# gradscope(?:, was: (?P<was>.*))?$")
# Recipes with no watched twin: TF1 has no tape to watch.
NOT_WATCHED = {"tf1_ddpg"}
# The twin's loss names (from its code) that the explicit recipe names otherwise.
RENAMED = {
    "ddpg": {"critic_loss": "critic", "actor_loss": "actor"},
    "gan": {"gen_loss": "g_loss", "disc_loss": "d_loss"},
    "actor_critic": {"actor_loss": "actor", "critic_loss": "critic"},
    "a2c": {"actor_loss": "actor", "critic_loss": "critic"},
}
# Scopes whose ||delta theta|| the explicit recipe measures over its optimizers
# only: its target update runs after `rec.apply` (or after its block). A watched
# call is one block, so the twin's ||delta theta|| includes the target's own move.
# Explicit recipes whose first step's ||delta theta|| is not measured: an eager
# block copies the variables at its entry, and at step 0 the recorder learns
# them only from the step's own gradients. A watched call measures it (the twin
# has one more UPDATE record, at step 0).
FIRST_UPDATE_UNMEASURED = {"td3"}
TARGETS_OUTSIDE = {"byol": ("target",), "byol_split": ("target_encoder", "target_projector")}


def plain_script(twin: str) -> str:
    """The twin without tb_gradscope: marked lines dropped, or put back as they were."""
    out = []
    for line in twin.splitlines():
        found = MARK.search(line)
        if found is None:
            out.append(line)
        elif found["was"] is not None:
            indent = line[: len(line) - len(line.lstrip())]
            out.append(indent + found["was"])
    return "\n".join(out) + "\n"


def changed_lines(plain: str, twin: str) -> int:
    """Lines the twin adds to or changes in the plain script (a replaced line counts once)."""
    matcher = difflib.SequenceMatcher(a=plain.splitlines(), b=twin.splitlines(), autojunk=False)
    return sum(
        max(i2 - i1, j2 - j1) for tag, i1, i2, j1, j2 in matcher.get_opcodes() if tag != "equal"
    )


def _twins() -> list[str]:
    return sorted(p.stem for p in WATCHED.glob("*.py"))


def test_every_tf2_recipe_has_a_watched_twin():
    explicit = {p.stem for p in RECIPES.glob("*.py")}
    assert set(_twins()) == explicit - NOT_WATCHED


def test_changed_lines_counts_a_replaced_line_once():
    plain = "a\n@tf.function\ndef f():\n    pass\n"
    twin = "imp\na\nrec\n@rec.watch\ndef f():\n    pass\n"
    assert changed_lines(plain, twin) == 3
    assert plain_script("x = 1  # gradscope\n@rec.watch  # gradscope, was: @tf.function\n") == (
        "@tf.function\n"
    )


@pytest.mark.parametrize("name", _twins())
def test_twin_differs_from_its_plain_script_by_at_most_3_lines(name):
    twin = (WATCHED / f"{name}.py").read_text(encoding="utf-8")
    plain = plain_script(twin)
    assert "rec." not in plain and "tb_gradscope" not in plain, "the plain script uses gradscope"
    assert 0 < changed_lines(plain, twin) <= MAX_CHANGED


@pytest.mark.parametrize("name", _twins())
def test_recipes_md_shows_each_twins_lines(name):
    blocks = dict(DOC_BLOCK.findall((RECIPES.parent / "RECIPES.md").read_text(encoding="utf-8")))
    assert name in blocks, f"docs/RECIPES.md has no '<!-- watched: {name} -->' block"
    shown = [line.strip() for line in blocks[name].splitlines() if line.strip()]
    twin = (WATCHED / f"{name}.py").read_text(encoding="utf-8").splitlines()
    assert shown == [line.strip() for line in twin if MARK.search(line)]


_ALIVE: list = []  # the scripts' globals: a freed recorder's id may be reused by warn_once


def _run(path: pathlib.Path, logdir: pathlib.Path) -> tuple[dict, list[str]]:
    with (
        warnings.catch_warnings(record=True) as caught,
        mock.patch.object(sys, "argv", [str(path), str(logdir)]),
    ):
        warnings.simplefilter("always")
        _ALIVE.append(runpy.run_path(str(path), run_name="__main__"))
    said = [str(w.message) for w in caught if w.category.__module__.startswith("tb_gradscope")]
    (run,) = read_records(str(logdir)).values()
    return run, said


@pytest.mark.slow
@pytest.mark.parametrize("name", _twins())
def test_twin_records_the_tables_of_the_explicit_recipe(name, tmp_path):
    explicit, _ = _run(RECIPES / f"{name}.py", tmp_path / "explicit")
    watched, said = _run(WATCHED / f"{name}.py", tmp_path / "watched")
    assert said == []
    renamed = RENAMED.get(name, {})
    watched = {  # a conflict's name is its two losses' ('a|b')
        (kind, "|".join(renamed.get(n, n) for n in key.split("|"))): v
        for (kind, key), v in watched.items()
    }
    kinds = ("grad_stats", "update_stats", "drift", "conflict")
    compared = sorted(k for k in explicit if k[0] in kinds)
    assert sorted(k for k in watched if k[0] in kinds) == compared
    assert ("grad_stats", "") not in compared and compared
    skip = TARGETS_OUTSIDE.get(name, ())
    for key in compared:
        steps = sorted(watched[key])
        if key[0] == "update_stats" and name in FIRST_UPDATE_UNMEASURED:
            assert steps[0] == 0 and 0 not in explicit[key]
            steps = steps[1:]
        assert steps == sorted(explicit[key]), key
        for step, table in explicit[key].items():
            mine = watched[key][step]
            for row, scope in enumerate(table.info.scopes):
                if key[0] == "update_stats" and scope.split("/")[0] in skip:
                    continue
                theirs = table.values[row]
                if key[0] == "drift" and step == steps[0]:
                    theirs = _first_drift(mine, theirs, row)
                np.testing.assert_allclose(
                    mine.values[row],
                    theirs,
                    rtol=1e-4,
                    atol=1e-7,
                    err_msg=f"{key} {scope} at step {step}",
                )


# The DRIFT columns measured against the step before the record's.
STEP_COLUMNS = ("target_step", "tau", "online_step", "gap", "tau_reverse", "gap_reverse")


def _first_drift(mine, theirs: np.ndarray, row: int) -> np.ndarray:
    """The explicit recipe's first DRIFT row as the twin must have it: a watched
    call reads the pair at its start, so its first record measures the step
    columns from the pair as initialised, where a plain tf.function has no step
    before (NaN); the columns the explicit recipe measured must agree."""
    columns = list(mine.info.columns)
    out = np.array(theirs, copy=True)
    for name in STEP_COLUMNS:
        i = columns.index(name)
        if np.isnan(out[i]):
            out[i] = mine.values[row][i]
    for name in ("target_step", "online_step"):
        assert np.isfinite(mine.values[row][columns.index(name)]), name
    return out
