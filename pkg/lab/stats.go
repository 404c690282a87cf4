package lab

import (
	"math"
	"sort"
)

// Percentile returns the p-th percentile (0-100) of xs by linear
// interpolation between closest ranks (the "R-7"/NumPy default). It returns
// NaN for no data.
func Percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if p <= 0 {
		return s[0]
	}
	if p >= 100 {
		return s[len(s)-1]
	}
	rank := p / 100 * float64(len(s)-1)
	lo := int(math.Floor(rank))
	frac := rank - float64(lo)
	if lo+1 >= len(s) {
		return s[lo]
	}
	return s[lo] + frac*(s[lo+1]-s[lo])
}

// Median is the 50th percentile (mean of the two middle values for an even
// count).
func Median(xs []float64) float64 { return Percentile(xs, 50) }

// Summary is what a report cell shows: median (min–max) over repetitions.
type Summary struct {
	N      int     `json:"n"`
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

// Summarize returns the median, minimum and maximum of xs.
func Summarize(xs []float64) Summary {
	if len(xs) == 0 {
		return Summary{Median: math.NaN(), Min: math.NaN(), Max: math.NaN()}
	}
	s := Summary{N: len(xs), Median: Median(xs), Min: xs[0], Max: xs[0]}
	for _, x := range xs {
		s.Min = math.Min(s.Min, x)
		s.Max = math.Max(s.Max, x)
	}
	return s
}
