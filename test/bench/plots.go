/*
Copyright The itemops Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// plots draws the latency CDFs and the Progress calls per second.
func plots(dir string, results []*result, sides []*sideRun) error {
	if len(results) > 0 {
		var series []any
		for _, r := range results {
			series = append(series, fmt.Sprintf("%d ops, %s", r.cfg.ops, r.cfg.polling), cdf(r.detections))
		}
		if err := save(dir, "detection-latency-cdf.png", "Detection latency (plugin-side completion → Progress call that sees it)",
			"seconds (log scale)", "share of operations", true, series...); err != nil {
			return err
		}
		series = series[:0]
		for _, r := range results {
			xy := make(plotter.XYs, len(r.callsPerSecondT))
			for i, v := range r.callsPerSecondT {
				xy[i] = plotter.XY{X: float64(i + 1), Y: v}
			}
			series = append(series, fmt.Sprintf("%d ops, %s", r.cfg.ops, r.cfg.polling), xy)
		}
		if err := save(dir, "progress-calls-per-second.png", "Progress calls per second", "seconds since the operations started",
			"calls / s", false, series...); err != nil {
			return err
		}
	}
	if err := costPlot(dir, results); err != nil {
		return err
	}
	if len(sides) > 0 {
		var series []any
		for _, r := range sides {
			series = append(series, "followed by "+r.mode, cdf(r.parent))
		}
		if err := save(dir, "side-by-side-parent-latency-cdf.png", "Parent latency (last operation done → Backup Finalizing)",
			"seconds (log scale)", "share of Backups", true, series...); err != nil {
			return err
		}
	}
	return nil
}

// cdf is the empirical distribution of ds, in seconds (at least 1 ms, for
// a log scale).
func cdf(ds []time.Duration) plotter.XYs {
	sorted := slices.Clone(ds)
	slices.Sort(sorted)
	xy := make(plotter.XYs, len(sorted))
	for i, d := range sorted {
		xy[i] = plotter.XY{X: max(d.Seconds(), 0.001), Y: float64(i+1) / float64(len(sorted))}
	}
	return xy
}

func save(dir, name, title, x, y string, logX bool, series ...any) error {
	p := plot.New()
	p.Title.Text, p.X.Label.Text, p.Y.Label.Text = title, x, y
	if logX {
		p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	}
	p.Add(plotter.NewGrid())
	if err := plotutil.AddLines(p, series...); err != nil {
		return fmt.Errorf("plotting %s: %w", name, err)
	}
	p.Legend.Top = !logX
	if err := p.Save(8*vg.Inch, 5*vg.Inch, filepath.Join(dir, name)); err != nil {
		return fmt.Errorf("saving %s: %w", name, err)
	}
	return nil
}

// costPlot draws, when runs of regular polling at two sizes or more were
// made, what one replica spends against the number of operations:
// Progress calls a second made and needed, operator CPU per call, peak RSS
// and API writes per operation.
func costPlot(dir string, results []*result) error {
	var runs []*result
	for _, r := range results {
		if r.cfg.polling == regularPolling {
			runs = append(runs, r)
		}
	}
	if len(runs) < 2 {
		return nil
	}
	slices.SortFunc(runs, func(a, b *result) int { return a.cfg.ops - b.cfg.ops })
	line := func(y func(*result) float64) plotter.XYs {
		xy := make(plotter.XYs, len(runs))
		for i, r := range runs {
			xy[i] = plotter.XY{X: float64(r.cfg.ops), Y: y(r)}
		}
		return xy
	}
	tile := func(title, y string, series ...any) (*plot.Plot, error) {
		p := plot.New()
		p.Title.Text, p.X.Label.Text, p.Y.Label.Text = title, "operations (log scale)", y
		p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
		p.Add(plotter.NewGrid())
		p.Legend.Top, p.Legend.Left = true, true
		return p, plotutil.AddLinePoints(p, series...)
	}
	calls, err := tile("Progress calls a second, all operations running", "calls / s",
		"made", line(func(r *result) float64 { return r.callsPerSecond }),
		"needed (every operation once per interval)", line(func(r *result) float64 { return float64(r.cfg.ops) / r.cfg.sync.Seconds() }))
	if err != nil {
		return err
	}
	cpu, err := tile("CPU per Progress call", "ms",
		"itemops", line(func(r *result) float64 { return 1000 * r.cpuSeconds / max(float64(r.calls), 1) }),
		"sample plugin", line(func(r *result) float64 { return 1000 * r.pluginCPU / max(float64(r.calls), 1) }),
		"API server and etcd", line(func(r *result) float64 { return 1000 * r.controlPlane / max(float64(r.calls), 1) }))
	if err != nil {
		return err
	}
	rss, err := tile("Operator peak RSS", "MiB",
		"itemops", line(func(r *result) float64 { return float64(r.peakRSS) / (1 << 20) }))
	if err != nil {
		return err
	}
	writes, err := tile("API writes per operation", "writes",
		"all, creation included", line(func(r *result) float64 { return r.writesPerOp + 1 }),
		"status", line(func(r *result) float64 { return r.writes["itemoperations/status"] / float64(r.cfg.ops) }))
	if err != nil {
		return err
	}
	img := vgimg.New(12*vg.Inch, 8*vg.Inch)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: 2, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	grid := [][]*plot.Plot{{calls, cpu}, {rss, writes}}
	canvases := plot.Align(grid, tiles, dc)
	for i := range grid {
		for j := range grid[i] {
			grid[i][j].Draw(canvases[i][j])
		}
	}
	f, err := os.Create(filepath.Join(dir, "cost-against-size.png"))
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("saving cost-against-size.png: %w", err)
	}
	return f.Close()
}
