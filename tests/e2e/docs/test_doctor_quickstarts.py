"""`tb-gradscope doctor` on the README's own quickstarts: correct code, so no
finding (issue 35, item 7: the TF1 quickstart's two var_lists both take in
seed 01's shared layer1, by design, and doctor once called that a bug)."""

from __future__ import annotations

import pytest

from tests.e2e.docs.test_readme_quickstarts import _quickstarts, _run
from tests.unit.commands.test_doctor import _doctor


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(_quickstarts()))
def test_readme_quickstart_has_no_finding(name, tmp_path):
    runs = _run(name, tmp_path)
    assert runs
    code, out, err = _doctor(tmp_path / "logs")
    assert code == 0 and '"findings": []' in out and "0 finding(s)" in err, out[-3000:]
    assert "note(s)" not in err, err[-2000:]
