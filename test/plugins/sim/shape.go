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

package sim

import (
	"hash/fnv"
	"math"
	"math/rand/v2"
	"time"
)

// Shapes of a transfer's rate over time.
const (
	// ShapeConstant moves Speed bytes every second from start to end.
	ShapeConstant = ""
	// ShapeReal moves as real uploads do: the rate wanders ±50% around
	// Speed, stops now and then for 5–30 s, and ends with a burst, the
	// last tenth at three times Speed. The profile is drawn from the
	// operation's ID, so every process that reads the state sees the same one.
	ShapeReal = "real"
)

// Bounds of the real shape.
const (
	// realPause is the chance that a stretch of the transfer is a pause.
	realPause   = 0.08
	minPause    = 5 * time.Second
	maxPause    = 30 * time.Second
	minStretch  = time.Second
	maxStretch  = 5 * time.Second
	minFactor   = 0.5
	maxFactor   = 1.5
	burstFactor = 3.0
	// burstFrom is the fraction of the size after which the burst starts.
	burstFrom = 0.9
)

// stretch is a part of a transfer at one rate, in bytes per second.
type stretch struct {
	length time.Duration
	rate   float64
}

// profile is the transfer's rate over time, stretch by stretch, until
// Size has moved.
func (st *State) profile() []stretch {
	if st.Shape != ShapeReal {
		return []stretch{{length: time.Duration(float64(st.Size) / float64(st.Speed) * float64(time.Second)), rate: float64(st.Speed)}}
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(st.ID))
	r := rand.New(rand.NewPCG(h.Sum64(), uint64(st.Size)))
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(r.Int64N(int64(hi-lo)+1)) }
	var profile []stretch
	var moved float64
	factor := 1.0
	burst := burstFrom * float64(st.Size)
	for moved < burst {
		if r.Float64() < realPause {
			profile = append(profile, stretch{length: between(minPause, maxPause)})
			continue
		}
		factor = min(max(factor*(0.75+0.5*r.Float64()), minFactor), maxFactor)
		s := stretch{length: between(minStretch, maxStretch), rate: float64(st.Speed) * factor}
		if left := burst - moved; s.rate*s.length.Seconds() >= left {
			// The last stretch before the burst ends where the burst begins.
			s.length = time.Duration(left / s.rate * float64(time.Second))
			profile = append(profile, s)
			moved += s.rate * s.length.Seconds()
			break
		}
		profile = append(profile, s)
		moved += s.rate * s.length.Seconds()
	}
	rate := burstFactor * float64(st.Speed)
	return append(profile, stretch{length: time.Duration(max(float64(st.Size)-moved, 0) / rate * float64(time.Second)), rate: rate})
}

// movedAfter is how many bytes have moved after elapsed, at most Size.
func (st *State) movedAfter(elapsed time.Duration) int64 {
	var moved float64
	for _, s := range st.profile() {
		if elapsed < s.length {
			moved += s.rate * max(elapsed, 0).Seconds()
			return max(0, min(int64(moved), st.Size))
		}
		moved += s.rate * s.length.Seconds()
		elapsed -= s.length
	}
	// At or past the profile's end: rounding must not leave the transfer short.
	return st.Size
}

// MovedAt is how many bytes the transfer has moved at a time, at most Size:
// what a stand-in for another data path reports of the same shape.
func (st *State) MovedAt(at time.Time) int64 {
	return st.movedAfter(at.Sub(st.Started))
}

// timeToMove is how long after the start the transfer has moved n bytes.
func (st *State) timeToMove(n int64) time.Duration {
	var elapsed time.Duration
	var moved float64
	for _, s := range st.profile() {
		if s.rate > 0 && moved+s.rate*s.length.Seconds() >= float64(n) {
			// Rounded up, so that the bytes moved by then are n, not one short.
			return elapsed + time.Duration(math.Ceil((float64(n)-moved)/s.rate*float64(time.Second))) + time.Microsecond
		}
		moved += s.rate * s.length.Seconds()
		elapsed += s.length
	}
	return elapsed
}
