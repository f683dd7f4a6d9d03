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

// Package metricsauth guards itemops' metrics endpoint as
// controller-runtime's filter does (the API server authenticates the
// caller's bearer token with a TokenReview and allows it to get the path
// with a SubjectAccessReview), with what a scraped endpoint reachable by
// others needs besides: a token the API server does not accept is a 401
// at once, whatever words its review gives (controller-runtime answers 500
// and logs an error when the review carries an error, as for a token that
// is not a JWT); an answer is kept for a minute, so that a caller
// repeating a token costs one review a minute, except a refusal that came
// with an error (it may be the authenticator's passing failure), which is
// not kept; and tokens not seen before are reviewed at a bounded rate per
// client address and in all, while tokens once accepted are reviewed again
// outside those bounds, so that a flood of bad tokens becomes neither a
// flood of TokenReviews nor of log lines, nor locks out the scrapers the
// endpoint serves.
package metricsauth
