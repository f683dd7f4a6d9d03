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

package metricsauth

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/time/rate"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/cache"
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
	// or a refusal without an error.
	CacheTTL time.Duration
	// ErrorTTL is how long a refusal that came with an error is kept:
	// the API server's reason for refusing a token that is not one of
	// its own, or its authenticator's passing failure.
	ErrorTTL time.Duration
	// ReviewRate and ReviewBurst bound the TokenReviews of tokens not
	// seen before (nor in the last CacheTTL) for one client address:
	// beyond them a request is answered 429.
	ReviewRate  rate.Limit
	ReviewBurst int
	// TotalReviewRate and TotalReviewBurst bound them for all client
	// addresses together.
	TotalReviewRate  rate.Limit
	TotalReviewBurst int
	// Known is how many accepted tokens are remembered, each for
	// KnownFor since its last acceptance: their reviews, once their
	// answer is no longer kept, count against no bound.
	Known    int
	KnownFor time.Duration
	// ReviewTimeout bounds one TokenReview.
	ReviewTimeout time.Duration
	// LogEvery is the least time between two log lines of failing
	// reviews.
	LogEvery time.Duration
}

// DefaultOptions: answers kept a minute, as controller-runtime keeps them,
// refusals with an error 5 seconds;
// 5 reviews a second of new tokens per address beyond a burst of 20, 10 a
// second in all beyond 40, far above what the Prometheus servers that
// scrape one itemops ask for (one token each, kept, then known); 1,000
// accepted tokens remembered for an hour.
var DefaultOptions = Options{
	CacheTTL:   time.Minute,
	ReviewRate: 5, ReviewBurst: 20,
	TotalReviewRate: 10, TotalReviewBurst: 40,
	Known: 1000, KnownFor: time.Hour,
	ErrorTTL:      5 * time.Second,
	ReviewTimeout: 10 * time.Second,
	LogEvery:      time.Minute,
}

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
	// errRefused: the API server refused the token and said why, which
	// may be its authenticator's passing failure: the refusal is kept
	// for ErrorTTL only.
	errRefused = errors.New("the API server refused the token")
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
	g := &gate{
		cached:     tokencache.New(&reviewer{reviews: authn.TokenReviews(), timeout: opts.ReviewTimeout}, false, opts.CacheTTL, opts.CacheTTL),
		opts:       opts,
		known:      cache.NewLRUExpireCache(max(opts.Known, 1)),
		answered:   cache.NewLRUExpireCache(answeredSize),
		erred:      cache.NewLRUExpireCache(answeredSize),
		perAddress: cache.NewLRUExpireCache(addressSize),
		total:      rate.NewLimiter(opts.TotalReviewRate, opts.TotalReviewBurst),
	}
	tokens := bearertoken.New(g)
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
			res, ok, err := tokens.AuthenticateRequest(req.WithContext(withAddress(req.Context(), req.RemoteAddr)))
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

// The most answered tokens and client addresses remembered: beyond them
// the least recently seen are forgotten, which costs a review within the
// bounds.
const (
	answeredSize = 4096
	addressSize  = 1024
	// addressFor is how long a client address's bound is remembered
	// since its last new token: long enough that a flood paused for a
	// moment finds its bound spent.
	addressFor = 10 * time.Minute
)

// gate authenticates tokens through the cache, and decides which of those
// without a kept answer may be reviewed now.
type gate struct {
	cached authenticator.Token
	opts   Options
	// known holds the accepted tokens (their hashes), answered the
	// tokens whose answer the cache keeps, erred the refusals with an
	// error (which the cache does not keep) for ErrorTTL; perAddress the
	// bound of each client address.
	known, answered, erred, perAddress *cache.LRUExpireCache
	mu                                 sync.Mutex
	total                              *rate.Limiter
}

var _ authenticator.Token = (*gate)(nil)

// AuthenticateToken implements authenticator.Token.
func (g *gate) AuthenticateToken(ctx context.Context, token string) (*authenticator.Response, bool, error) {
	key := sha256.Sum256([]byte(token))
	if err, ok := g.erred.Get(key); ok {
		return nil, false, err.(error)
	}
	_, known := g.known.Get(key)
	_, answered := g.answered.Get(key)
	// A token answered within CacheTTL costs no review, and a known one
	// one review per CacheTTL: neither needs a bound.
	if !known && !answered && !g.admit(addressFrom(ctx)) {
		return nil, false, errBusy
	}
	res, ok, err := g.cached.AuthenticateToken(ctx, token)
	switch {
	case errors.Is(err, errRefused):
		// A token once accepted stays known: the refusal may pass.
		g.erred.Add(key, err, g.opts.ErrorTTL)
	case err != nil:
		// The API server not asked: reviewed again at the next request,
		// within the bounds unless known.
	case ok:
		g.known.Add(key, struct{}{}, g.opts.KnownFor)
		g.answered.Add(key, struct{}{}, g.opts.CacheTTL)
	default:
		g.known.Remove(key)
		g.answered.Add(key, struct{}{}, g.opts.CacheTTL)
	}
	return res, ok, err
}

// admit takes one review from the bounds of address and of all addresses.
func (g *gate) admit(address string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	var limiter *rate.Limiter
	if l, ok := g.perAddress.Get(address); ok {
		limiter = l.(*rate.Limiter)
	} else {
		limiter = rate.NewLimiter(g.opts.ReviewRate, g.opts.ReviewBurst)
	}
	g.perAddress.Add(address, limiter, addressFor)
	return limiter.Allow() && g.total.Allow()
}

type addressKey struct{}

// withAddress carries the client's address (its host, without the port)
// to the gate: bearertoken passes the request's context on.
func withAddress(ctx context.Context, remote string) context.Context {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	return context.WithValue(ctx, addressKey{}, host)
}

func addressFrom(ctx context.Context) string {
	address, _ := ctx.Value(addressKey{}).(string)
	return address
}

// reviewer authenticates tokens with TokenReviews.
type reviewer struct {
	reviews authenticationv1client.TokenReviewInterface
	timeout time.Duration
}

// AuthenticateToken implements authenticator.Token.
func (r *reviewer) AuthenticateToken(ctx context.Context, token string) (*authenticator.Response, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	review, err := r.reviews.Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return nil, false, fmt.Errorf("%w: %w", errUnavailable, err)
	}
	if !review.Status.Authenticated {
		if review.Status.Error != "" {
			return nil, false, fmt.Errorf("%w: %s", errRefused, review.Status.Error)
		}
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
