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

package controllers

import (
	"math/rand/v2"
	"time"

	itemopsv1alpha1 "github.com/itemops/itemops/api/v1alpha1"
	"github.com/itemops/itemops/internal/progress"
)

// etaMargin is added to a predicted completion, so that the poll at the
// predicted time finds the operation done rather than a moment short of it.
// The work queue never hands a poll out early, and an estimate from the
// plugin's own reading times is exact for a steady rate: side by side with
// Velero, 100 ms here were 100 ms of every Backup's wait for Finalizing
// (each last operation was seen done 101–104 ms after its end); at 10 ms
// every one of 1,696 operations was seen done 11–22 ms after its end, none
// polled a moment short of it.
const etaMargin = 10 * time.Millisecond

// nextPoll is when to poll a running operation again: the sync frequency
// (with jitter, backed off after failures), or with ETA polling the
// predicted completion when that comes first (by: the time that poll is
// for, zero for a regular poll). A poll that comes
// a moment before the operation ends is followed by one just after it, not
// a whole interval later. Only once an estimate has slipped (a poll made for
// it found the operation still running) is the next poll no sooner than
// MinPollInterval: an estimate that keeps slipping costs at most a poll per
// MinPollInterval until the operation ends.
//
// After the first poll by this process the next one is spread over the
// whole interval. Operations created together, or all of them when the
// manager starts, would otherwise be polled in waves of thousands at once;
// at 10,000 operations the end of each wave came later than the interval.
// Spread, the same polls come at an even rate, for half a poll more per
// operation.
//
// predicted is the completion to go by (predictedEnd), lead how far ahead
// of it to poll: what the plugin's estimates are known to run late by
// (leadFor).
func (r *ItemOperationReconciler) nextPoll(op *itemopsv1alpha1.ItemOperation, now time.Time, first, slipped bool, predicted time.Time, lead time.Duration) (wait time.Duration, by time.Time) {
	next := jitter(r.pollInterval(op))
	if first {
		next = spread(r.pollInterval(op))
	}
	if !r.ETAPolling || op.Status.PollFailures > 0 || predicted.IsZero() {
		return next, time.Time{}
	}
	at := predicted.Add(-lead)
	until := at.Sub(now) + etaMargin
	if until >= next {
		return next, time.Time{}
	}
	floor := etaMargin
	if slipped {
		floor = r.MinPollInterval
	}
	return max(until, floor), at
}

// predictedEnd is the completion the last reading predicts: the earlier of
// the status' estimate (the average rate since the start) and recent (the
// rate since the previous poll, recentEstimate; zero when there is none).
// Real transfers speed up toward their end, which the average sees late.
// Zero when there is no estimate.
func predictedEnd(op *itemopsv1alpha1.ItemOperation, recent time.Time) time.Time {
	if op.Status.EstimatedCompletion == nil {
		return time.Time{}
	}
	estimate := op.Status.EstimatedCompletion.Time
	if !recent.IsZero() && recent.Before(estimate) {
		estimate = recent
	}
	return estimate
}

// leadSteps are the quantiles of a plugin's lateness that successive polls
// made for one estimate lead it by: the first poll comes ahead of it by
// what two thirds of its estimates ran late, the next by what one third
// did, the third at the estimate. An estimate from a reading up to 10 s old
// is so caught within a third of that of the end, for about one more poll.
var leadSteps = []float64{2.0 / 3, 1.0 / 3}

// leadFor is how far ahead of its estimate to poll an operation whose
// last steps polls made for an estimate found it still running.
func (r *ItemOperationReconciler) leadFor(op *itemopsv1alpha1.ItemOperation, steps int) time.Duration {
	if r.Lateness == nil || steps >= len(leadSteps) {
		return 0
	}
	return r.Lateness.Lead(op.Mover(), leadSteps[steps])
}

// learnLateness records, for an operation that just completed, how much
// later than its end the last estimate came, when the plugin says when it
// ended.
func (r *ItemOperationReconciler) learnLateness(op *itemopsv1alpha1.ItemOperation, last polled, now time.Time) {
	s := &op.Status
	if r.Lateness == nil || last.predicted.IsZero() || s.Phase != itemopsv1alpha1.OperationPhaseCompleted ||
		s.Updated == nil || s.Started == nil || !s.Updated.After(s.Started.Time) || s.Updated.After(now) {
		return
	}
	r.Lateness.Add(op.Mover(), last.predicted.Sub(s.Updated.Time))
}

// maxRetryInterval bounds the backoff between failing polls.
const maxRetryInterval = 5 * time.Minute

// pollInterval is the sync frequency, doubled for every failed poll in a
// row, so a plugin in trouble is not hammered.
func (r *ItemOperationReconciler) pollInterval(op *itemopsv1alpha1.ItemOperation) time.Duration {
	d := r.SyncFrequency
	for i := int32(1); i < op.Status.PollFailures && d < maxRetryInterval; i++ {
		d *= 2
	}
	return min(d, max(r.SyncFrequency, maxRetryInterval))
}

// jitter draws the next poll between 80% and 90% of the interval: early
// rather than late, so that every operation is still polled at least once
// per interval. The last 10% is for the workqueue to hand the poll out: at
// 10,000 operations on two cores, a wave of ends (a hundred a second, each
// a status write) kept due polls waiting for a worker for up to a second
// (`make bench`, its work queue figures), and polls drawn up to 95% came up
// to 10.5 s apart.
func jitter(d time.Duration) time.Duration {
	return d - d*10/100 - time.Duration(rand.Int64N(int64(d)/10+1))
}

// spread is a time drawn evenly between 10% and 90% of d.
func spread(d time.Duration) time.Duration {
	return d/10 + time.Duration(rand.Int64N(int64(d)*80/100+1))
}

// reading is what one poll read: how much was done, and when (the plugin's
// own time of the reading when it gives one).
type reading struct {
	done     int64
	measured time.Time
}

// readingOf is the reading the status of op holds after a poll at now.
func readingOf(op *itemopsv1alpha1.ItemOperation, now time.Time) reading {
	return reading{done: op.Status.NCompleted, measured: measuredAt(&op.Status, now)}
}

// recentEstimate is when a transfer of total finishes at the rate it moved
// from prev to cur, two readings of successive polls; zero when it did not
// move or there is no previous reading.
func recentEstimate(prev, cur reading, total int64) time.Time {
	if prev.measured.IsZero() || cur.done <= prev.done {
		return time.Time{}
	}
	eta, ok := progress.ETA(prev.measured, cur.measured, cur.done-prev.done, total-prev.done)
	if !ok {
		return time.Time{}
	}
	return eta
}
