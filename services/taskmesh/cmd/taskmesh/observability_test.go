package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/taskmesh/taskmesh/platform/archtest"
)

// observabilityDir is deployments/observability in the repository.
func observabilityDir(t *testing.T) string {
	t.Helper()
	root, err := archtest.RepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, "deployments", "observability")
}

// alertsWanted are the conditions the rules must alert on, by alert name.
var alertsWanted = []string{
	"TaskmeshOutboxBacklogGrowing", "TaskmeshOutboxPublishErrors", "TaskmeshProjectionLagging",
	"TaskmeshProjectionErrors", "TaskmeshDeadLetters", "TaskmeshAgentsLost", "TaskmeshQueueStarved",
	"TaskmeshHTTPErrorRate",
}

// checkAlertRules loads every rule file with Prometheus's own parser
// (which parses each expression too) and checks that each expression
// selects only metrics the running stack exports.
func checkAlertRules(t *testing.T, s scrape) {
	files, err := filepath.Glob(filepath.Join(observabilityDir(t), "prometheus", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no rule files: %v", err)
	}
	var alerts []string
	for _, f := range files {
		groups, errs := rulefmt.ParseFile(f, false, model.UTF8Validation, parser.NewParser(parser.Options{}), nil)
		if len(errs) > 0 {
			t.Fatalf("%s: %v", f, errs)
		}
		for _, g := range groups.Groups {
			for _, r := range g.Rules {
				if r.Alert != "" {
					alerts = append(alerts, r.Alert)
					if r.Annotations["summary"] == "" || r.Labels["severity"] == "" {
						t.Errorf("%s: alert %s needs a summary and a severity", f, r.Alert)
					}
				}
				checkExpr(t, s, f+": "+r.Alert+r.Record, r.Expr)
			}
		}
	}
	for _, a := range alertsWanted {
		if !slices.Contains(alerts, a) {
			t.Errorf("no alert %s", a)
		}
	}
}

// checkExpr parses expr and checks every metric it selects is exported.
func checkExpr(t *testing.T, s scrape, where, expr string) {
	t.Helper()
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		t.Errorf("%s: %v", where, err)
		return
	}
	var names int
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			names++
			if !s.has(vs.Name) {
				t.Errorf("%s: %s is not a metric Taskmesh exports", where, vs.Name)
			}
		}
		return nil
	})
	if names == 0 {
		t.Errorf("%s: %q selects no metric", where, expr)
	}
}

// dashboard is the part of a Grafana dashboard the test reads.
type dashboard struct {
	Title  string  `json:"title"`
	UID    string  `json:"uid"`
	Panels []panel `json:"panels"`
}

type panel struct {
	Title   string  `json:"title"`
	Type    string  `json:"type"`
	Panels  []panel `json:"panels"` // a row's
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

// checkDashboard checks every Grafana dashboard's queries parse and name
// exported metrics, with Grafana's interval variable replaced.
func checkDashboard(t *testing.T, s scrape) {
	files, err := filepath.Glob(filepath.Join(observabilityDir(t), "grafana", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboards: %v", err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d dashboard
		if err := json.Unmarshal(b, &d); err != nil || d.Title == "" || d.UID == "" {
			t.Fatalf("%s: %v (title %q, uid %q)", f, err, d.Title, d.UID)
		}
		var exprs int
		var walk func([]panel)
		walk = func(ps []panel) {
			for _, p := range ps {
				walk(p.Panels)
				for _, tg := range p.Targets {
					exprs++
					checkExpr(t, s, f+": "+p.Title, strings.ReplaceAll(tg.Expr, "$__rate_interval", "5m"))
				}
			}
		}
		walk(d.Panels)
		if exprs < 10 {
			t.Errorf("%s: %d queries; the dashboard should cover every area", f, exprs)
		}
	}
}
