package verify

import "math"

// NMSE is test-backend-ops' normalized mean squared error of x against the
// reference ref: sum (x - ref)^2 / sum ref^2. Two all-zero arrays give 0; an
// all-zero reference against anything else gives +Inf. A NaN anywhere gives
// NaN, which fails every limit.
func NMSE(ref, x []float64) float64 {
	var num, den float64
	for i := range ref {
		d := x[i] - ref[i]
		num += d * d
		den += ref[i] * ref[i]
	}
	if den == 0 {
		if num == 0 {
			return 0
		}
		return math.Inf(1)
	}
	return num / den
}

// RMSRatio is fla's error: RMS(ref - x) / RMS(ref), the square root of NMSE.
func RMSRatio(ref, x []float64) float64 { return math.Sqrt(NMSE(ref, x)) }

// GradModeErr is test-backend-ops' grad-mode error of an analytic gradient
// ga against a numeric one gn: the mean over elements of
// |(gn - ga) / (gn + ga)|. An element where both are below floor in
// magnitude counts as agreeing (0): there the ratio measures only the noise
// of the finite difference, and test-backend-ops' inputs never put a
// gradient there, while ours do (a zero initial state has zero dg at t = 0).
func GradModeErr(gn, ga []float64, floor float64) float64 {
	if len(gn) == 0 {
		return 0
	}
	var sum float64
	for i := range gn {
		if math.Abs(gn[i]) < floor && math.Abs(ga[i]) < floor {
			continue
		}
		if gn[i] == ga[i] {
			continue
		}
		sum += math.Abs((gn[i] - ga[i]) / (gn[i] + ga[i]))
	}
	return sum / float64(len(gn))
}

// MaxRelErr is max_i |gn_i - ga_i| / scale: the worst error of a numeric
// gradient relative to the largest analytic entry (scale, which should be
// max |ga| over the whole tensor). A scale of 0 makes the error absolute.
func MaxRelErr(gn, ga []float64, scale float64) float64 {
	var worst float64
	for i := range gn {
		d := math.Abs(gn[i] - ga[i])
		if math.IsNaN(d) {
			return math.NaN()
		}
		worst = max(worst, d)
	}
	if scale == 0 {
		return worst
	}
	return worst / scale
}

// maxAbs is max |x_i|.
func maxAbs(x []float64) float64 {
	var m float64
	for _, v := range x {
		m = max(m, math.Abs(v))
	}
	return m
}
