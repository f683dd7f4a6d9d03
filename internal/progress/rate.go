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

package progress

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// Sample is one reading of an operation's progress: how much was done, and when.
type Sample struct {
	At   time.Time
	Done int64
}

// RateSpan is the time throughput is measured over.
const RateSpan = time.Minute

// Window adds s to samples and keeps those of the last span before it, and
// the newest one older than that, so that the window covers the whole span
// once the operation has run that long. A reading lower than the last one
// (the plugin started over) starts a new window; one no newer than the last
// replaces it.
func Window(samples []Sample, s Sample, span time.Duration) []Sample {
	if n := len(samples); n > 0 {
		last := samples[n-1]
		switch {
		case s.Done < last.Done:
			samples = samples[:0]
		case !s.At.After(last.At):
			samples = samples[:n-1]
		}
	}
	samples = append(samples, s)
	cut := 0
	for i := range samples {
		if s.At.Sub(samples[i].At) <= span {
			break
		}
		cut = i
	}
	if cut > 0 {
		samples = append(samples[:0], samples[cut:]...)
	}
	return samples
}

// Rate is the units per second over samples, from the oldest to the newest;
// false with fewer than two readings at distinct times.
func Rate(samples []Sample) (float64, bool) {
	if len(samples) < 2 {
		return 0, false
	}
	first, last := samples[0], samples[len(samples)-1]
	elapsed := last.At.Sub(first.At).Seconds()
	if elapsed <= 0 {
		return 0, false
	}
	return float64(last.Done-first.Done) / elapsed, true
}

// FormatRate renders a rate in units per second for people: bytes with a
// binary prefix ("12.5Mi/s"), other units with their name ("3.2 items/s").
func FormatRate(perSecond float64, units string) string {
	perSecond = max(perSecond, 0)
	if IsBytes(units) {
		if perSecond >= math.MaxInt64 {
			return "-"
		}
		return bytes(int64(math.Round(perSecond))) + "B/s"
	}
	s := fmt.Sprintf("%.1f", perSecond)
	s = strings.TrimSuffix(s, ".0")
	if units == "" {
		return s + "/s"
	}
	return s + " " + units + "/s"
}
