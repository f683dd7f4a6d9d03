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
	"math"
	"slices"
	"time"
)

// resource is one thing a soak watches for growth, and how much change over
// the last half of the run still counts as flat: rel of its median there,
// or abs, whichever is larger.
type resource struct {
	name, unit string
	value      func(sample) float64
	rel, abs   float64
	// why the tolerance is what it is.
	why string
}

var resources = []resource{
	{name: "resident memory", unit: "MiB", value: func(s sample) float64 { return mib(float64(s.rss)) }, rel: 0.10, abs: 16,
		why: "the Go runtime returns memory to the system lazily, and the cache moves with the operations the stream holds"},
	{name: "Go heap in use", unit: "MiB", value: func(s sample) float64 { return mib(s.heap) }, rel: 0.10, abs: 16,
		why: "it rises and falls with each garbage collection cycle"},
	{name: "goroutines", value: func(s sample) float64 { return s.goroutines }, rel: 0.05, abs: 20,
		why: "calls in flight to the plugins and the API server come and go"},
	{name: "open file descriptors", value: func(s sample) float64 { return float64(s.files) }, rel: 0.05, abs: 10,
		why: "connections to the plugin processes and the API server come and go"},
	{name: "plugin processes", value: func(s sample) float64 { return float64(s.plugins) }, abs: 1,
		why: "one process per plugin binary; a killed one is started again at the next call"},
	{name: "API server watches", value: func(s sample) float64 { return s.watches }, abs: 1,
		why: "one watch per kind itemops caches; a restarted API server drops them until they are made again"},
	{name: "work queue depth", value: func(s sample) float64 { return s.queue }, rel: 0.25, abs: 100,
		why: "operations fall due in waves of the sync interval"},
}

// mib converts bytes to MiB, keeping -1 (not read) as it is.
func mib(bytes float64) float64 {
	if bytes < 0 {
		return -1
	}
	return bytes / (1 << 20)
}

// trend is a resource over the last half of a run.
type trend struct {
	resource
	// firstHalf: the median of the first half; median: of the last half.
	firstHalf, median float64
	// perHour: the Theil–Sen slope over the last half, per hour; change:
	// that slope over the last half's length.
	perHour, change float64
	tolerance       float64
	flat            bool
	// points: samples read in the last half.
	points int
}

// trendOf fits a resource's samples of the last half of a run of length
// ran. The Theil–Sen estimator (the median of the slopes between every two
// samples) is used, rather than least squares, so that a fault's spike (the
// watches gone while the API server restarts, a plugin process killed)
// does not tilt the line.
func trendOf(r resource, samples []sample, ran time.Duration) trend {
	half := ran / 2
	var first, xs, ys []float64
	for _, s := range samples {
		v := r.value(s)
		if v < 0 {
			continue
		}
		if s.at < half {
			first = append(first, v)
			continue
		}
		xs = append(xs, s.at.Hours())
		ys = append(ys, v)
	}
	t := trend{resource: r, firstHalf: median(first), median: median(ys), points: len(ys)}
	t.perHour = theilSen(xs, ys)
	t.change = t.perHour * (ran - half).Hours()
	t.tolerance = math.Max(r.rel*math.Abs(t.median), r.abs)
	t.flat = len(ys) >= 3 && math.Abs(t.change) <= t.tolerance
	return t
}

// theilSen is the median of the slopes between every two points with
// different x.
func theilSen(xs, ys []float64) float64 {
	var slopes []float64
	for i := range xs {
		for j := i + 1; j < len(xs); j++ {
			if xs[j] != xs[i] {
				slopes = append(slopes, (ys[j]-ys[i])/(xs[j]-xs[i]))
			}
		}
	}
	return median(slopes)
}

// median of values; NaN for none.
func median(values []float64) float64 {
	if len(values) == 0 {
		return math.NaN()
	}
	v := slices.Clone(values)
	slices.Sort(v)
	if n := len(v); n%2 == 1 {
		return v[n/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}
