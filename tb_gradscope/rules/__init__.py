"""Flow rules: `never`, `only`, `blocked`, `tracks`, and the violations that break them.

Plain Python over `tb_gradscope.format` (never tensorflow): the recorder checks
rules while training, `tb-gradscope check` checks them over logs, and
`tb_gradscope.testing` checks them in users' pytest suites. docs/RULES.md
describes the semantics.
"""

from tb_gradscope.rules.check import check_flowgraph, check_stats
from tb_gradscope.rules.model import (
    Blocked,
    Never,
    Only,
    Rule,
    RuleError,
    Tracks,
    blocked,
    never,
    only,
    parse_rule,
    scope_matches,
    tracks,
)
from tb_gradscope.rules.paths import gradient_path
from tb_gradscope.rules.policy import FlowRuleViolation, FlowRuleWarning, apply_policy
from tb_gradscope.rules.rulesfile import RulesFileError, RuleSet, parse_rules_file
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
]
