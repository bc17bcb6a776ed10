"""Flow rules: `never`, `only`, `blocked`, `tracks`, `updates`, and the violations that break them.

Rule objects and their parsing (`model`, `rulesfile`), checks of a FlowGraph
and of one step's gradient tables (`check`), and the `RuleChecker` a recorder
holds (`runner`, `policy`). Plain Python over `tb_gradscope.format` (never
tensorflow); imports only `format` and `scopes`. Imported by the recorder and
the integrations (rules checked while training), by `read` (rules evaluated
over logs: `read.violations`, and `tracks` rules over drift series in
`read.tracks`) and by `tb_gradscope.testing`. docs/RULES.md describes the
semantics.
"""

from tb_gradscope.rules.check import check_flowgraph, check_stats
from tb_gradscope.rules.model import (
    Blocked,
    Never,
    Only,
    Rule,
    RuleError,
    Tracks,
    Updates,
    blocked,
    never,
    only,
    parse_rule,
    scope_matches,
    tracks,
    updates,
)
from tb_gradscope.rules.paths import gradient_path
from tb_gradscope.rules.policy import FlowRuleViolation, FlowRuleWarning, apply_policy
from tb_gradscope.rules.rulesfile import RuleSet, RulesFileError, parse_rules_file
from tb_gradscope.rules.runner import RuleChecker

__all__ = [
    "Blocked",
    "FlowRuleViolation",
    "FlowRuleWarning",
    "Never",
    "Only",
    "Rule",
    "RuleChecker",
    "RuleError",
    "RuleSet",
    "RulesFileError",
    "Tracks",
    "Updates",
    "apply_policy",
    "blocked",
    "check_flowgraph",
    "check_stats",
    "gradient_path",
    "never",
    "only",
    "parse_rule",
    "parse_rules_file",
    "scope_matches",
    "tracks",
    "updates",
]
