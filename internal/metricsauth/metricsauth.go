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
// with a SubjectAccessReview), with three differences a scraped endpoint
// needs: a token the API server does not accept is a 401 at once, whatever
// words its review gives (controller-runtime answers 500 and logs an error
// when the review carries an error, as for a token that is not a JWT);
// every answer, refusals included, is kept for a minute, so that a caller
// repeating a bad token costs one review; and tokens not seen before are
// reviewed at a bounded rate, so that a burst of bad tokens becomes neither
// a burst of TokenReviews nor one of log lines.
package metricsauth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/time/rate"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/request/bearertoken"
	tokencache "k8s.io/apiserver/pkg/authentication/token/cache"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	authenticationv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationv1client "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// Options bound what guarding the endpoint costs the API server.
type Options struct {
	// CacheTTL is how long an answer to a token is kept, an acceptance
	// or a refusal.
	CacheTTL time.Duration
	// ReviewRate and ReviewBurst bound the TokenReviews of tokens whose
	// answer is not kept: beyond them a request is answered 429.
	ReviewRate  rate.Limit
	ReviewBurst int
	// ReviewTimeout bounds one TokenReview.
	ReviewTimeout time.Duration
	// LogEvery is the least time between two log lines of failing
	// reviews.
	LogEvery time.Duration
}

// DefaultOptions: answers kept a minute, as controller-runtime keeps them;
// 5 reviews a second beyond a burst of 20, far above what the Prometheus
// servers that scrape one itemops ask for (one token each, kept).
var DefaultOptions = Options{CacheTTL: time.Minute, ReviewRate: 5, ReviewBurst: 20, ReviewTimeout: 10 * time.Second, LogEvery: time.Minute}

// Filter is a metrics server filter with DefaultOptions, the signature of
// controller-runtime's FilterProvider.
func Filter(config *rest.Config, httpClient *http.Client) (metricsserver.Filter, error) {
	return New(config, httpClient, DefaultOptions)
}

var (
	// errBusy: the token is not known and no review may be made now.
	errBusy = errors.New("too many tokens to review")
	// errUnavailable: the API server could not be asked.
	errUnavailable = errors.New("the API server could not review the token")
)

// New is a metrics server filter with opts.
func New(config *rest.Config, httpClient *http.Client, opts Options) (metricsserver.Filter, error) {
	authn, err := authenticationv1client.NewForConfigAndClient(config, httpClient)
	if err != nil {
		return nil, err
	}
	authz, err := authorizationv1client.NewForConfigAndClient(config, httpClient)
	if err != nil {
		return nil, err
	}
	tokens := bearertoken.New(tokencache.New(&reviewer{
		reviews: authn.TokenReviews(),
		limiter: rate.NewLimiter(opts.ReviewRate, opts.ReviewBurst),
		timeout: opts.ReviewTimeout,
	}, false, opts.CacheTTL, opts.CacheTTL))
	// As controller-runtime's filter authorizes, with its caches and retries.
	access, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: authz,
		AllowCacheTTL:             5 * time.Minute,
		DenyCacheTTL:              30 * time.Second,
		WebhookRetryBackoff:       &wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5},
	}.New()
	if err != nil {
		return nil, fmt.Errorf("creating the authorizer: %w", err)
	}
	return func(log logr.Logger, handler http.Handler) (http.Handler, error) {
		failures := &rate.Sometimes{Interval: opts.LogEvery}
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			res, ok, err := tokens.AuthenticateRequest(req)
			switch {
			case errors.Is(err, errBusy):
				w.Header().Set("Retry-After", "1")
				http.Error(w, "Too many tokens to review, try again", http.StatusTooManyRequests)
				return
			case errors.Is(err, errUnavailable):
				failures.Do(func() { log.Error(err, "Authentication failed (logged once a minute at most)") })
				http.Error(w, "Authentication unavailable", http.StatusServiceUnavailable)
				return
			case err != nil || !ok:
				// Not a token the API server accepts: the caller's fault,
				// not the server's, and not worth a log line.
				http.Error(w, "Unauthorized", http.StatusUnauthorized)
				return
			}
			attributes := authorizer.AttributesRecord{User: res.User, Verb: strings.ToLower(req.Method), Path: req.URL.Path}
			decision, reason, err := access.Authorize(req.Context(), attributes)
			switch {
			case err != nil:
				failures.Do(func() {
					log.Error(err, "Authorization failed (logged once a minute at most)", "user", res.User.GetName())
				})
				http.Error(w, "Authorization unavailable", http.StatusServiceUnavailable)
				return
			case decision != authorizer.DecisionAllow:
				log.V(4).Info("Authorization denied", "user", res.User.GetName(), "reason", reason)
				http.Error(w, fmt.Sprintf("Authorization denied for user %s", res.User.GetName()), http.StatusForbidden)
				return
			}
			handler.ServeHTTP(w, req)
		}), nil
	}, nil
}

// reviewer asks the API server about a token with a TokenReview, at a
// bounded rate. A review that does not authenticate the token is a
// refusal, whatever error it carries: the API server has looked at the
// token and does not accept it.
type reviewer struct {
	reviews authenticationv1client.TokenReviewInterface
	limiter *rate.Limiter
	timeout time.Duration
}

func (r *reviewer) AuthenticateToken(ctx context.Context, token string) (*authenticator.Response, bool, error) {
	if !r.limiter.Allow() {
		return nil, false, errBusy
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	review, err := r.reviews.Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return nil, false, fmt.Errorf("%w: %w", errUnavailable, err)
	}
	if !review.Status.Authenticated {
		return nil, false, nil
	}
	u := review.Status.User
	extra := make(map[string][]string, len(u.Extra))
	for k, v := range u.Extra {
		extra[k] = v
	}
	return &authenticator.Response{
		User:      &user.DefaultInfo{Name: u.Username, UID: u.UID, Groups: u.Groups, Extra: extra},
		Audiences: authenticator.Audiences(review.Status.Audiences),
	}, true, nil
}
