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
	"testing"
	"time"
)

func TestWindowAndRate(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	var w []Sample
	if _, ok := Rate(w); ok {
		t.Fatal("a rate from no reading")
	}
	w = Window(w, Sample{at(0), 0}, time.Minute)
	if _, ok := Rate(w); ok {
		t.Fatal("a rate from one reading")
	}
	// 1 MiB a second for 100 s, read every 10 s.
	for s := 10; s <= 100; s += 10 {
		w = Window(w, Sample{at(s), int64(s) << 20}, time.Minute)
	}
	if w[0].At != at(30) || w[len(w)-1].At != at(100) {
		t.Fatalf("the window runs from %s to %s, want from 30s (the last reading before the minute) to 100s", w[0].At.Sub(t0), w[len(w)-1].At.Sub(t0))
	}
	r, ok := Rate(w)
	if !ok || r != 1<<20 {
		t.Fatalf("rate %v %v, want 1Mi/s", r, ok)
	}
	if got := FormatRate(r, "Bytes"); got != "1MiB/s" {
		t.Fatalf("FormatRate = %q", got)
	}
	// Then nothing moves for a minute and a half: the rate falls to 0.
	for s := 110; s <= 190; s += 10 {
		w = Window(w, Sample{at(s), 100 << 20}, time.Minute)
	}
	if r, ok := Rate(w); !ok || r != 0 {
		t.Fatalf("rate after a still minute %v %v, want 0", r, ok)
	}
	// The plugin starts over: a new window.
	w = Window(w, Sample{at(200), 5}, time.Minute)
	if len(w) != 1 {
		t.Fatalf("a lower reading kept %d samples, want 1", len(w))
	}
	// Two readings at the same time: the newer replaces the older.
	w = Window(w, Sample{at(200), 7}, time.Minute)
	if len(w) != 1 || w[0].Done != 7 {
		t.Fatalf("a reading at the same time gave %v", w)
	}
}

func TestFormatRate(t *testing.T) {
	for _, c := range []struct {
		rate  float64
		units string
		want  string
	}{
		{0, "Bytes", "0B/s"},
		{512, "bytes", "512B/s"},
		{12.5 * (1 << 20), "Bytes", "12.5MiB/s"},
		{-3, "Bytes", "0B/s"},
		{3.25, "items", "3.2 items/s"},
		{2, "", "2/s"},
	} {
		if got := FormatRate(c.rate, c.units); got != c.want {
			t.Errorf("FormatRate(%v, %q) = %q, want %q", c.rate, c.units, got, c.want)
		}
	}
}
