package lab

import (
	"math"
	"testing"
)

func TestPercentile(t *testing.T) {
	xs := []float64{15, 20, 35, 40, 50} // unsorted input must not matter
	shuffled := []float64{40, 15, 50, 20, 35}
	for _, c := range []struct{ p, want float64 }{
		{0, 15}, {25, 20}, {50, 35}, {75, 40}, {100, 50}, {40, 29}, {90, 46},
	} {
		if got := Percentile(shuffled, c.p); !near(got, c.want) {
			t.Errorf("Percentile(%v, %v) = %v, want %v", xs, c.p, got, c.want)
		}
	}
	if shuffled[0] != 40 {
		t.Error("Percentile sorted its input in place")
	}
	if !math.IsNaN(Percentile(nil, 50)) {
		t.Error("Percentile of nothing is not NaN")
	}
	if got := Percentile([]float64{7}, 99); got != 7 {
		t.Errorf("single value: %v", got)
	}
}

func TestMedian(t *testing.T) {
	if got := Median([]float64{3, 1, 2}); got != 2 {
		t.Errorf("odd: %v", got)
	}
	if got := Median([]float64{4, 1, 3, 2}); got != 2.5 {
		t.Errorf("even: %v", got)
	}
}

func TestSummarize(t *testing.T) {
	s := Summarize([]float64{75.1, 57.0, 75.6})
	if s.N != 3 || s.Median != 75.1 || s.Min != 57.0 || s.Max != 75.6 {
		t.Errorf("got %+v", s)
	}
	if got := formatSummary(s, 1); got != "75.1 (57.0–75.6)" {
		t.Errorf("cell %q", got)
	}
	if got := formatSummary(Summarize([]float64{4.6}), 1); got != "4.6" {
		t.Errorf("one run: %q", got)
	}
	if got := formatSummary(Summarize(nil), 1); got != "–" {
		t.Errorf("no runs: %q", got)
	}
}
