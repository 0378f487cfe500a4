#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Checks a Grafana dashboard's PromQL against a real /metrics scrape:
#
#   check-dashboard.py DASHBOARD.json SCRAPE.txt
#   check-dashboard.py --rules DASHBOARD.json
#
# Every metric name a panel or a template variable queries must be the name
# of a sample in the scrape, exactly: a histogram is queried as X_bucket,
# X_sum or X_count, never as X. Besides:
# - rate(), irate() and increase() apply to counters (or a histogram's
#   series) only, and a counter is never shown raw;
# - histogram_quantile() takes _bucket series aggregated by a list that
#   keeps `le`;
# - by/without lists, label matchers and label_values() name labels the
#   queried metrics have (or job/instance, which Prometheus adds);
# - an exact matcher (label="value") names a value the scrape shows.
# A selector by __name__ is refused: its name could not be checked.
# Prints one line per problem and exits 1 if there is any, 0 otherwise;
# exits 2 when a file cannot be read or the dashboard is not JSON.
#
# --rules prints every query as a recording rule of a Prometheus rules
# file, Grafana's variables replaced ($__rate_interval by 5m, $__range by
# 1h, others by .*), for `promtool check rules` to parse: the PromQL
# parser proper, which this script is not.
#
# It does not evaluate PromQL (no Prometheus here) nor check Grafana's
# panel options; it is a static check written for the dashboards of
# dist/grafana/.
import json
import re
import sys

TARGET_LABELS = {"job", "instance"}
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right",
            "bool", "and", "or", "unless", "offset", "inf", "nan"}
RANGE_FUNCS = ("rate", "irate", "increase")
HIST_SUFFIXES = ("_bucket", "_sum", "_count")
IDENT = r"[A-Za-z_:][A-Za-z0-9_:]*"
# Grafana's label_values(SELECTOR, LABEL): not PromQL, SELECTOR is.
LABEL_VALUES = re.compile(r"\s*label_values\((.*),\s*(\w+)\s*\)\s*")


def read_scrape(path):
	"""Returns (labels, types): sample name -> {label: {values}}, and
	family name -> TYPE."""
	labels, types = {}, {}
	with open(path, encoding="utf-8") as f:
		for line in f:
			line = line.strip()
			m = re.match(r"# TYPE (\S+) (\S+)", line)
			if m:
				types[m.group(1)] = m.group(2)
			if not line or line.startswith("#"):
				continue
			m = re.match(r"(" + IDENT + r")(\{(.*)\})?\s", line)
			if not m:
				continue
			ls = labels.setdefault(m.group(1), {})
			for k, v in re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"',
			                       m.group(3) or ""):
				ls.setdefault(k, set()).add(v)
	return labels, types


def sample_type(name, types):
	if name in types:
		return types[name]
	for s in HIST_SUFFIXES:
		base = name[:-len(s)]
		if name.endswith(s) and types.get(base) in ("histogram",
		                                             "summary"):
			return "histogram-series"
	return None


def queries(dash):
	"""Yields (where, expr, is_template) for every query of <dash>."""
	def walk(panels):
		for p in panels or []:
			for t in p.get("targets") or []:
				if t.get("expr"):
					yield (p.get("title", "?"), t["expr"],
					       False)
			yield from walk(p.get("panels"))
	yield from walk(dash.get("panels"))
	for v in (dash.get("templating") or {}).get("list", []):
		if v.get("type") != "query":
			continue
		q = v.get("query")
		if isinstance(q, dict):
			q = q.get("query")
		if q:
			yield "variable $" + v.get("name", "?"), q, True


class Expr:
	"""The names, matchers and grouping labels of one PromQL expression."""

	def __init__(self, text):
		self.label_values = []		# LABEL of label_values()
		m = LABEL_VALUES.fullmatch(text)
		if m:
			self.label_values.append(m.group(2))
			text = m.group(1)
		# Grafana variables; inside strings and ranges they go anyway.
		text = re.sub(r"\$\{?\w+\}?", "", text)
		self.matchers = []	# (metric or None, label, op, value)
		self.grouping = []	# (by or without, [labels])
		self.names = []		# (name, inside rate()/increase())
		self.quantile = "histogram_quantile" in text
		text = self._selectors(text)
		text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', text)	# strings
		text = re.sub(r"\[[^\]]*\]", "", text)
		text = self._grouping(text)
		for m in re.finditer(IDENT, text):
			name = m.group(0)
			after = text[m.end():].lstrip()
			before = text[:m.start()]
			if name in KEYWORDS or after.startswith("("):
				continue
			prev = text[m.start() - 1] if m.start() > 0 else " "
			if re.match(r"[\w.]", prev):
				continue	# the tail of a number: 1e3
			inside = re.search(r"\b(" + "|".join(RANGE_FUNCS) +
			                   r")\s*\(\s*$", before) is not None
			self.names.append((name, inside))

	def _selectors(self, text):
		out, pos = [], 0
		for m in re.finditer(r"(" + IDENT + r")?\s*\{([^}]*)\}", text):
			metric = m.group(1)
			for k, op, v in re.findall(
			        r'(\w+)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"',
			        m.group(2)):
				self.matchers.append((metric, k, op, v))
			out.append(text[pos:m.start()])
			out.append(metric or "")
			pos = m.end()
		out.append(text[pos:])
		return "".join(out)

	def _grouping(self, text):
		def keep(m):
			ls = [s.strip() for s in m.group(2).split(",")
			      if s.strip()]
			if m.group(1) in ("by", "without"):
				self.grouping.append((m.group(1), ls))
			return " "
		return re.sub(r"\b(by|without|on|ignoring|group_left|"
		              r"group_right)\s*\(([^)]*)\)", keep, text)


def check_expr(where, text, is_template, labels, types):
	problems = []
	e = Expr(text)
	say = lambda msg: problems.append("%s: %s" % (where, msg))
	used = {n for n, _ in e.names}
	known = set(TARGET_LABELS)
	for n in used:
		if n not in labels:
			say("metric %s is not in the scrape" % n)
			continue
		known |= set(labels[n])
	for n, inside in e.names:
		if n not in labels:
			continue
		t = sample_type(n, types)
		if inside and t not in ("counter", "histogram-series"):
			say("rate()/increase() over %s, a %s" % (n, t))
		if not inside and not is_template and t == "counter":
			say("counter %s used without rate()/increase()" % n)
	for metric, k, op, v in e.matchers:
		if metric is None and k == "__name__":
			say("selector by __name__: name the metric instead")
			continue
		if k not in known:
			say("label %s is not a label of %s" % (k, sorted(used)))
		elif (op == "=" and metric in labels and k not in TARGET_LABELS
		      and v not in labels[metric].get(k, set())):
			say('%s{%s="%s"}: no such value in the scrape' %
			    (metric, k, v))
	for how, ls in e.grouping:
		for k in ls:
			if k not in known:
				say("%s (%s): %s is not a label of %s" %
				    (how, ", ".join(ls), k, sorted(used)))
	for k in e.label_values:
		if k not in known:
			say("label_values: %s is not a label of %s" %
			    (k, sorted(used)))
	if e.quantile:
		if any(not n.endswith("_bucket") for n in used):
			say("histogram_quantile over %s: query the _bucket "
			    "series" % sorted(used))
		if not any(how == "by" and "le" in ls
		           for how, ls in e.grouping):
			say("histogram_quantile without `by (..., le)`")
	return problems


def promql(text):
	"""<text> as plain PromQL: Grafana's variables replaced, the
	selector of label_values(SELECTOR, LABEL) kept."""
	m = LABEL_VALUES.fullmatch(text)
	if m:
		text = m.group(1)
	durations = {"__rate_interval": "5m", "__interval": "1m",
	             "__range": "1h"}
	return re.sub(r"\$\{?(\w+)\}?",
	              lambda v: durations.get(v.group(1), ".*"), text)


def print_rules(dash):
	"""Prints the queries of <dash> as a Prometheus rules file."""
	print("groups:\n  - name: dashboard\n    rules:")
	for i, (where, text, _) in enumerate(queries(dash)):
		print("      - record: dashboard:query%d  # %s" %
		      (i + 1, where.replace("\n", " ")))
		print("        expr: %s" % json.dumps(promql(text)))
	return 0


def main(argv):
	rules = len(argv) == 3 and argv[1] == "--rules"
	if len(argv) != 3:
		print("usage: check-dashboard.py DASHBOARD.json SCRAPE.txt\n"
		      "       check-dashboard.py --rules DASHBOARD.json",
		      file=sys.stderr)
		return 2
	try:
		with open(argv[2 if rules else 1], encoding="utf-8") as f:
			dash = json.load(f)
		if rules:
			return print_rules(dash)
		labels, types = read_scrape(argv[2])
	except (OSError, ValueError) as err:
		print("check-dashboard: %s" % err, file=sys.stderr)
		return 2
	problems, n = [], 0
	for where, text, is_template in queries(dash):
		n += 1
		problems += check_expr(where, text, is_template, labels, types)
	if n == 0:
		problems.append("no PromQL query in the dashboard")
	for p in problems:
		print(p)
	print("check-dashboard: %d queries, %d problems" % (n, len(problems)),
	      file=sys.stderr)
	return 1 if problems else 0


if __name__ == "__main__":
	sys.exit(main(sys.argv))
