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
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"golang.org/x/time/rate"
	"k8s.io/client-go/rest"

	"github.com/itemops/itemops/test/envtest"
	"github.com/itemops/itemops/test/scrape"
)

var env *envtest.Environment

func TestMetricsAuth(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Metrics authentication", Label("envtest"))
}

var _ = BeforeSuite(func() {
	var err error
	env, err = envtest.Start()
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(env.Stop)
})

// guarded is the metrics endpoint behind a filter of opts that asks the
// API server of config: its URL, how many TokenReviews it sent, and its
// error log lines.
type guarded struct {
	url     string
	reviews *atomic.Int64
	mu      sync.Mutex
	errors  []string
}

func (g *guarded) errorLines() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.errors...)
}

func guard(config *rest.Config, opts Options) *guarded {
	g := &guarded{reviews: &atomic.Int64{}}
	transport, err := rest.TransportFor(config)
	Expect(err).NotTo(HaveOccurred())
	httpClient := &http.Client{Transport: counting{next: transport, reviews: g.reviews}}
	filter, err := New(config, httpClient, opts)
	Expect(err).NotTo(HaveOccurred())
	log := funcr.New(func(prefix, args string) {
		if strings.Contains(args, `"error"`) {
			g.mu.Lock()
			g.errors = append(g.errors, args)
			g.mu.Unlock()
		}
	}, funcr.Options{})
	handler, err := filter(log, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "itemops_up 1") }))
	Expect(err).NotTo(HaveOccurred())
	server := httptest.NewServer(handler)
	DeferCleanup(server.Close)
	g.url = server.URL + "/metrics"
	return g
}

// counting counts the TokenReviews sent through it.
type counting struct {
	next    http.RoundTripper
	reviews *atomic.Int64
}

func (c counting) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/tokenreviews") {
		c.reviews.Add(1)
	}
	return c.next.RoundTrip(req)
}

func get(url, token string) int {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	Expect(err).NotTo(HaveOccurred())
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	Expect(err).NotTo(HaveOccurred())
	resp.Body.Close()
	return resp.StatusCode
}

var testOptions = Options{CacheTTL: time.Minute, ReviewRate: 2, ReviewBurst: 5, ReviewTimeout: 10 * time.Second, LogEvery: time.Minute}

var _ = Describe("The metrics endpoint's guard", func() {
	It("answers a bearer token that is not a token 401, with no error logged, and reviews it once however often it comes", func() {
		g := guard(env.Config, testOptions)
		for range 20 {
			Expect(get(g.url, "not-a-token")).To(Equal(http.StatusUnauthorized))
		}
		Expect(g.reviews.Load()).To(Equal(int64(1)), "TokenReviews")
		Expect(g.errorLines()).To(BeEmpty())
		Expect(get(g.url, "")).To(Equal(http.StatusUnauthorized), "no token")
	})

	It("reviews a burst of distinct bad tokens at the bounded rate, answering each 401 or 429", func() {
		g := guard(env.Config, testOptions)
		start := time.Now()
		codes := make([]int, 60)
		var wg sync.WaitGroup
		for i := range codes {
			wg.Go(func() {
				defer GinkgoRecover()
				codes[i] = get(g.url, fmt.Sprintf("bad-token-%d", i))
			})
		}
		wg.Wait()
		elapsed := time.Since(start)
		for _, code := range codes {
			Expect(code).To(BeElementOf(http.StatusUnauthorized, http.StatusTooManyRequests))
		}
		// The limiter's own bound: its burst, and its rate over the time
		// the burst took.
		bound := int64(testOptions.ReviewBurst) + int64(float64(testOptions.ReviewRate)*elapsed.Seconds()) + 1
		Expect(g.reviews.Load()).To(BeNumerically("<=", bound), "TokenReviews for 60 tokens in %s", elapsed)
		Expect(codes).To(ContainElement(http.StatusTooManyRequests))
		Expect(g.errorLines()).To(BeEmpty())
	})

	It("lets a reader of /metrics in and keeps out an account that may not read it", func(ctx context.Context) {
		g := guard(env.Config, testOptions)
		token, err := scrape.ReaderToken(ctx, env.Config, "default")
		Expect(err).NotTo(HaveOccurred())
		Expect(get(g.url, token)).To(Equal(http.StatusOK))
		Expect(get(g.url+"/other", token)).To(Equal(http.StatusForbidden))
	})

	It("answers 503 while the API server cannot be asked, with one log line", func() {
		config := rest.CopyConfig(env.Config)
		config.Host = "https://127.0.0.1:1"
		g := guard(config, Options{CacheTTL: time.Minute, ReviewRate: rate.Inf, ReviewTimeout: 5 * time.Second, LogEvery: time.Hour})
		for i := range 5 {
			Expect(get(g.url, fmt.Sprintf("token-%d", i))).To(Equal(http.StatusServiceUnavailable))
		}
		Expect(g.errorLines()).To(HaveLen(1))
	})
})
