"""Expectation suites as versioned data: ``expectations/<layer>.<table>.yaml``.

Pure Python (no Spark, no Great Expectations import): loading, parameter substitution, the
policy of each expectation, and the Spark SQL predicate that selects a row-level rule's
offending rows for quarantine. The GX side is :mod:`pipelines.quality.engine`.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from pipelines.runtime.config import ConfigError, JobsFile

LAYERS = ("bronze", "silver", "gold")
POLICIES = ("fail", "warn", "quarantine")
# expectation types whose offending rows can be selected by a predicate (and so quarantined)
ROW_LEVEL = (
    "expect_column_values_to_not_be_null",
    "expect_column_values_to_be_between",
    "expect_column_values_to_be_in_set",
    "expect_column_value_lengths_to_be_between",
)
REQUIREMENTS = ("offsets_partitions", "truth_snapshot")
_PARAM = re.compile(r"^\$([a-z_]+)$")


class SuiteError(ValueError):
    """An invalid suite file; the message names the file and the field."""


@dataclass(frozen=True)
class ExpectationSpec:
    name: str
    type: str
    kwargs: dict[str, Any]
    policy: str | None = None  # the suite's default for this rule (jobs.yaml overrides win)
    quarantinable: bool = True
    requires: str | None = None  # evaluated only when this input is known

    @property
    def row_level(self) -> bool:
        return self.type in ROW_LEVEL

    @property
    def can_quarantine(self) -> bool:
        return self.row_level and self.quarantinable


@dataclass(frozen=True)
class Suite:
    name: str  # <layer>.<table>
    layer: str
    table: str
    frame: str
    key: tuple[str, ...]
    expectations: tuple[ExpectationSpec, ...]
    description: str = ""
    requires: str | None = None
    version: str = ""

    def expectation(self, name: str) -> ExpectationSpec:
        for e in self.expectations:
            if e.name == name:
                return e
        raise KeyError(f"{self.name}: no expectation {name!r}")


@dataclass
class Suites:
    suites: dict[str, Suite] = field(default_factory=dict)

    def __iter__(self):
        return iter(self.suites.values())

    def __getitem__(self, name: str) -> Suite:
        return self.suites[name]

    def layer(self, layer: str) -> list[Suite]:
        return [s for s in self if s.layer == layer]

    def targets(self, key: str) -> list[tuple[Suite, ExpectationSpec | None]]:
        """What an overrides key names: a layer, a suite, ``<suite>.<expectation>`` or an
        expectation name (every suite's expectation of that name). Empty: unknown key."""
        if key in LAYERS:
            return [(s, None) for s in self.layer(key)]
        if key in self.suites:
            return [(self.suites[key], None)]
        out: list[tuple[Suite, ExpectationSpec | None]] = []
        for s in self:
            for e in s.expectations:
                if key in (f"{s.name}.{e.name}", e.name):
                    out.append((s, e))
        return out


def expectations_dir() -> Path:
    """``expectations/`` of the source tree (next to ``pipelines/``)."""
    here = Path(__file__).resolve()
    for candidate in (here.parents[1] / "_expectations", here.parents[2] / "expectations"):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError("expectations/ not found next to the pipelines package")


def _require(doc: dict[str, Any], key: str, where: str) -> Any:
    if key not in doc:
        raise SuiteError(f"{where}: {key}: field required")
    return doc[key]


def parse_suite(doc: Any, where: str, version: str = "") -> Suite:
    if not isinstance(doc, dict):
        raise SuiteError(f"{where}: expected a mapping")
    name = _require(doc, "suite", where)
    layer, _, table = str(name).partition(".")
    if layer not in LAYERS or not table:
        raise SuiteError(f"{where}: suite: must be <layer>.<table> with layer in {LAYERS}, got {name!r}")
    requires = doc.get("requires")
    if requires is not None and requires not in REQUIREMENTS:
        raise SuiteError(f"{where}: requires: one of {REQUIREMENTS}, got {requires!r}")
    exps = []
    seen = set()
    for i, e in enumerate(_require(doc, "expectations", where) or []):
        at = f"{where}: expectations[{i}]"
        if not isinstance(e, dict):
            raise SuiteError(f"{at}: expected a mapping")
        ename = _require(e, "name", at)
        if ename in seen:
            raise SuiteError(f"{at}: name: {ename!r} appears twice")
        seen.add(ename)
        etype = _require(e, "type", at)
        if not re.fullmatch(r"expect_[a-z_]+|unexpected_rows_expectation", str(etype)):
            raise SuiteError(f"{at}: type: not a Great Expectations expectation type: {etype!r}")
        policy = e.get("policy")
        if policy is not None and policy not in POLICIES:
            raise SuiteError(f"{at}: policy: one of {POLICIES}, got {policy!r}")
        if policy == "quarantine" and layer == "gold":
            raise SuiteError(f"{at}: policy: quarantine is not allowed on gold suites (fail or warn)")
        ereq = e.get("requires")
        if ereq is not None and ereq not in REQUIREMENTS:
            raise SuiteError(f"{at}: requires: one of {REQUIREMENTS}, got {ereq!r}")
        kwargs = e.get("kwargs") or {}
        if not isinstance(kwargs, dict):
            raise SuiteError(f"{at}: kwargs: expected a mapping")
        exps.append(ExpectationSpec(ename, etype, kwargs, policy, bool(e.get("quarantinable", True)), ereq))
    if not exps:
        raise SuiteError(f"{where}: expectations: at least one is needed")
    return Suite(
        name=name,
        layer=layer,
        table=table,
        frame=doc.get("frame", name),
        key=tuple(doc.get("key", ())),
        expectations=tuple(exps),
        description=str(doc.get("description", "")).strip(),
        requires=requires,
        version=version,
    )


def load_suites(root: Path | None = None) -> Suites:
    root = root or expectations_dir()
    out = Suites()
    for path in sorted(root.glob("*.yaml")):
        text = path.read_text()
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise SuiteError(f"{path.name}: not valid YAML: {exc}") from None
        suite = parse_suite(doc, path.name, hashlib.sha256(text.encode()).hexdigest()[:12])
        if path.stem != suite.name:
            raise SuiteError(f"{path.name}: suite: {suite.name!r} must match the file name")
        out.suites[suite.name] = suite
    return out


def substitute(kwargs: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """``"$max_clock_skew_minutes"`` -> the value of that quality setting."""

    def one(value: Any) -> Any:
        if isinstance(value, str):
            m = _PARAM.match(value)
            if m:
                if m.group(1) not in params:
                    raise SuiteError(f"unknown parameter {value!r} (known: {sorted(params)})")
                return params[m.group(1)]
        if isinstance(value, list):
            return [one(v) for v in value]
        return value

    return {k: one(v) for k, v in kwargs.items()}


def resolve_policy(
    suite: Suite, exp: ExpectationSpec, default: str = "fail", overrides: dict[str, str] | None = None
) -> str:
    """The policy of one expectation: jobs.yaml overrides (``<suite>.<expectation>``, the
    expectation's name, the suite, the layer — most specific first), else the suite file's
    default for the rule, else the job's ``policy``. Quarantine where rows cannot be quarantined
    (gold, aggregate rules, rules marked ``quarantinable: false``) becomes fail: a rule that
    cannot be acted on never passes silently."""
    overrides = overrides or {}
    for key in (f"{suite.name}.{exp.name}", exp.name, suite.name, suite.layer):
        if key in overrides:
            policy = overrides[key]
            break
    else:
        policy = exp.policy or default
    if policy == "quarantine" and (suite.layer == "gold" or not exp.can_quarantine):
        return "fail"
    return policy


def check_overrides(overrides: dict[str, str], suites: Suites | None = None) -> list[str]:
    """Problems with a job's overrides, one message per key (empty: valid)."""
    suites = suites or load_suites()
    problems = []
    for key, policy in overrides.items():
        targets = suites.targets(key)
        if not targets:
            problems.append(f"{key}: unknown suite, layer or expectation (suites: {', '.join(sorted(suites.suites))})")
            continue
        if policy != "quarantine":
            continue
        if any(s.layer == "gold" for s, _ in targets):
            problems.append(
                f"{key}: quarantine is not allowed on gold suites (gold must equal the coordinator's state): "
                "fail or warn"
            )
        elif any(e is not None and not e.can_quarantine for _, e in targets):
            problems.append(f"{key}: this expectation cannot quarantine rows (not a row-level rule): fail or warn")
    return problems


def _sql(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"


def violation_predicate(exp: ExpectationSpec, kwargs: dict[str, Any]) -> str:
    """Spark SQL selecting the rows a row-level expectation counts as unexpected (nulls are
    'missing', not unexpected, for every type but not_be_null — as GX counts them)."""
    col = f"`{kwargs['column']}`"
    if exp.type == "expect_column_values_to_not_be_null":
        return f"{col} IS NULL"
    if exp.type in ("expect_column_values_to_be_between", "expect_column_value_lengths_to_be_between"):
        value = f"length({col})" if "lengths" in exp.type else col
        parts = []
        if kwargs.get("min_value") is not None:
            op = "<=" if kwargs.get("strict_min") else "<"
            parts.append(f"{value} {op} {_sql(kwargs['min_value'])}")
        if kwargs.get("max_value") is not None:
            op = ">=" if kwargs.get("strict_max") else ">"
            parts.append(f"{value} {op} {_sql(kwargs['max_value'])}")
        return f"{col} IS NOT NULL AND ({' OR '.join(parts) or 'false'})"
    if exp.type == "expect_column_values_to_be_in_set":
        values = ", ".join(_sql(v) for v in kwargs["value_set"])
        return f"{col} IS NOT NULL AND NOT ({col} IN ({values}))"
    raise ValueError(f"{exp.type} is not a row-level expectation")


def check_job_overrides(config: JobsFile, path: str | Path) -> None:
    """Refuse a jobs file whose quality overrides name no suite or rule, or quarantine where rows
    cannot move (gold): the error names the file and the field, like every jobs.yaml error."""
    suites = load_suites()
    for name, job in config.jobs.items():
        problems = check_overrides(job.quality.overrides, suites)
        if problems:
            raise ConfigError(f"{path}: jobs.{name}.quality.overrides: {'; '.join(problems)}")
