package bench

import (
	"fmt"
	"math"
	"strings"
)

// chartSeries are the lines of the chart: events/s against max_in_flight.
var chartSeries = []struct {
	key, label, color, dash string
}{
	{MIdem, "idem end to end", "#1f5fbf", ""},
	{MLimit, "limit (i): idem's SQL, pgx loop", "#e07b00", ""},
	{MFloor, "floor (ii): DELETE + INSERT, pgx", "#2a9d3a", "6 4"},
	{MPgbench1tx, "pgbench, 1 tx with audit (target reference)", "#7b4fb0", "2 3"},
	{MNaive, "naive consumer (doubles rows)", "#c0392b", "10 4"},
}

// SVG is the chart of the small-event throughput, hand-written SVG.
func (r *Results) SVG() string {
	const (
		w, h                  = 860, 440
		left, right, top, bot = 70, 300, 50, 60
	)
	pw, ph := float64(w-left-right), float64(h-top-bot)
	var ymax float64
	for _, p := range r.Small {
		for _, s := range chartSeries {
			if m := p.Methods[s.key]; m != nil {
				ymax = max(ymax, m.Throughput.PerSec)
			}
		}
	}
	step := niceStep(ymax / 5)
	if step == 0 {
		step = 1
	}
	ytop := math.Ceil(ymax*1.05/step) * step
	n := len(r.Small)
	x := func(i int) float64 {
		if n == 1 {
			return float64(left) + pw/2
		}
		return float64(left) + pw*float64(i)/float64(n-1)
	}
	y := func(v float64) float64 { return float64(top) + ph*(1-v/ytop) }

	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif" font-size="12">`+"\n", w, h, w, h)
	p(`<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", w, h)
	p(`<text x="%d" y="24" font-size="15" font-weight="bold">Small events (10-row partitions): events/s against max_in_flight</text>`+"\n", left)
	p(`<text x="%d" y="40" fill="#555">%s mode, %d events per run, median of %d; %s</text>`+"\n", left, r.Mode, r.Sizes.Events, r.Sizes.Reps, r.Started.Format("2006-01-02"))
	for v := 0.0; v <= ytop+step/2; v += step {
		p(`<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e5e5e5"/>`+"\n", left, y(v), float64(left)+pw, y(v))
		p(`<text x="%d" y="%.1f" text-anchor="end" fill="#444">%s</text>`+"\n", left-8, y(v)+4, thousands(int64(v)))
	}
	p(`<line x1="%d" y1="%d" x2="%d" y2="%.1f" stroke="#333"/>`+"\n", left, top, left, float64(top)+ph)
	p(`<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333"/>`+"\n", left, float64(top)+ph, float64(left)+pw, float64(top)+ph)
	for i, pt := range r.Small {
		p(`<text x="%.1f" y="%.1f" text-anchor="middle" fill="#444">%d</text>`+"\n", x(i), float64(top)+ph+18, pt.InFlight)
	}
	p(`<text x="%.1f" y="%d" text-anchor="middle" fill="#222">max_in_flight (= pgx / pgbench clients)</text>`+"\n", float64(left)+pw/2, h-16)
	p(`<text transform="translate(18 %.1f) rotate(-90)" text-anchor="middle" fill="#222">events per second</text>`+"\n", float64(top)+ph/2)

	for si, s := range chartSeries {
		var pts []string
		for i, pt := range r.Small {
			if m := pt.Methods[s.key]; m != nil && m.Throughput.PerSec > 0 {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(i), y(m.Throughput.PerSec)))
			}
		}
		if len(pts) == 0 {
			continue
		}
		dash := ""
		if s.dash != "" {
			dash = fmt.Sprintf(` stroke-dasharray="%s"`, s.dash)
		}
		p(`<polyline fill="none" stroke="%s" stroke-width="2.5"%s points="%s"/>`+"\n", s.color, dash, strings.Join(pts, " "))
		for i, pt := range r.Small {
			if m := pt.Methods[s.key]; m != nil && m.Throughput.PerSec > 0 {
				p(`<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"><title>%s, max_in_flight %d: %s events/s</title></circle>`+"\n",
					x(i), y(m.Throughput.PerSec), s.color, s.label, pt.InFlight, num(m.Throughput.PerSec))
				if s.key == MIdem {
					// Below and right of the point: idem is usually the lowest line.
					p(`<text x="%.1f" y="%.1f" fill="%s" font-weight="bold">%s</text>`+"\n",
						x(i)+7, y(m.Throughput.PerSec)+16, s.color, num(m.Throughput.PerSec))
				}
			}
		}
		ly := float64(top) + 14 + float64(si)*22
		lx := float64(w-right) + 16
		p(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2.5"%s/>`+"\n", lx, ly, lx+26, ly, s.color, dash)
		p(`<text x="%.1f" y="%.1f" fill="#222">%s</text>`+"\n", lx+32, ly+4, s.label)
	}
	p("</svg>\n")
	return b.String()
}

// niceStep rounds a raw tick step to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 0
	}
	pow := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if raw <= m*pow {
			return m * pow
		}
	}
	return 10 * pow
}
