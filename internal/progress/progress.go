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
	"math/bits"
	"strings"
	"time"
)

// Format renders done of total in units. Byte counts use binary prefixes;
// other units are printed as they are. An unknown total gives just the
// amount done.
func Format(done, total int64, units string) string {
	if done <= 0 && total <= 0 {
		return ""
	}
	amount := func(n int64) string { return fmt.Sprintf("%d", n) }
	suffix := ""
	if IsBytes(units) {
		amount = bytes
	} else if units != "" {
		suffix = " " + units
	}
	if total <= 0 {
		return amount(done) + suffix
	}
	return fmt.Sprintf("%s/%s%s (%d%%)", amount(done), amount(total), suffix, percent(done, total))
}

// percent is the floor of done/total in percent, clamped to 0–100, for any
// counts: done*100 would overflow for counts beyond 92 PB.
func percent(done, total int64) int64 {
	switch {
	case done <= 0:
		return 0
	case done >= total:
		return 100
	}
	hi, lo := bits.Mul64(uint64(done), 100)
	// 0 < done < total, so the quotient is below 100 and hi below total.
	q, _ := bits.Div64(hi, lo, uint64(total))
	return int64(q)
}

// IsBytes reports whether units are bytes, however a plugin spells them.
func IsBytes(units string) bool {
	switch strings.ToLower(units) {
	case "bytes", "byte", "b":
		return true
	}
	return false
}

// bytes renders n with a binary prefix and at most one decimal: 4.2Gi, 10Gi, 512.
func bytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d", n)
	}
	value, prefix := float64(n), ""
	for _, p := range []string{"Ki", "Mi", "Gi", "Ti", "Pi", "Ei"} {
		if value < unit {
			break
		}
		value /= unit
		prefix = p
	}
	s := fmt.Sprintf("%.1f", value)
	s = strings.TrimSuffix(s, ".0")
	return s + prefix
}

// ETA estimates when the operation finishes from its average rate since it
// started, as measured at now (the plugin's own time of the measurement when
// it reports one). It returns false when there is nothing to go on: no start time,
// no total, nothing done yet, or already done.
func ETA(started, now time.Time, done, total int64) (time.Time, bool) {
	if started.IsZero() || total <= 0 || done <= 0 || done >= total || !now.After(started) {
		return time.Time{}, false
	}
	elapsed := now.Sub(started)
	remaining := float64(elapsed) * float64(total-done) / float64(done)
	if remaining >= float64(maxEstimate) {
		// Centuries away, or more than a Duration holds: no estimate.
		return time.Time{}, false
	}
	// Not rounded: ETA-aware polling schedules the next poll by it, and an
	// estimate a fraction of a second early costs a poll that finds the
	// operation not quite done.
	return now.Add(time.Duration(remaining)), true
}

// maxEstimate is the furthest an estimate may lie ahead.
const maxEstimate = 100 * 365 * 24 * time.Hour
