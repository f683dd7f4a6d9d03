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
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
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
	bodies  *sync.Map
	mu      sync.Mutex
	errors  []string
}

func (g *guarded) errorLines() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.errors...)
}

func guard(config *rest.Config, opts Options) *guarded {
	g := &guarded{reviews: &atomic.Int64{}, bodies: &sync.Map{}}
	transport, err := rest.TransportFor(config)
	Expect(err).NotTo(HaveOccurred())
	httpClient := &http.Client{Transport: counting{next: transport, reviews: g.reviews, bodies: g.bodies}}
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

// counting counts the TokenReviews sent through it, and keeps their
// bodies.
type counting struct {
	next    http.RoundTripper
	reviews *atomic.Int64
	bodies  *sync.Map // review number → body
}

func (c counting) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/tokenreviews") {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return nil, err
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		c.bodies.Store(c.reviews.Add(1), body)
	}
	return c.next.RoundTrip(req)
}

// reviewsOf is how many TokenReviews of token were sent.
func (g *guarded) reviewsOf(token string) int64 {
	var n int64
	g.bodies.Range(func(_, body any) bool {
		if bytes.Contains(body.([]byte), []byte(token)) {
			n++
		}
		return true
	})
	return n
}

func get(url, token string) int {
	return getFrom(&http.Client{Timeout: 30 * time.Second}, url, token)
}

// from is a client whose requests come from address, one of the
// loopback's.
func from(address string) *http.Client {
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(address)}, Timeout: 10 * time.Second}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: dialer.DialContext, MaxIdleConnsPerHost: 16}}
}

func getFrom(c *http.Client, url, token string) int {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	Expect(err).NotTo(HaveOccurred())
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	Expect(err).NotTo(HaveOccurred())
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

var testOptions = Options{
	CacheTTL: time.Minute, ReviewRate: 2, ReviewBurst: 5, TotalReviewRate: 4, TotalReviewBurst: 10,
	Known: 10, KnownFor: time.Hour, ErrorTTL: 5 * time.Second, ReviewTimeout: 10 * time.Second, LogEvery: time.Minute,
}

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

	It("keeps a flood of new tokens from one address within its bounds, while a scraper it accepted before and a new one from another address get in", func(ctx context.Context) {
		opts := testOptions
		opts.CacheTTL = 2 * time.Second
		g := guard(env.Config, opts)
		scraper, err := scrape.ReaderToken(ctx, env.Config, "default")
		Expect(err).NotTo(HaveOccurred())
		Expect(getFrom(from("127.0.0.1"), g.url, scraper)).To(Equal(http.StatusOK))

		By("a flood of random tokens from 127.0.0.2")
		flooder := from("127.0.0.2")
		stop := make(chan struct{})
		var flood sync.WaitGroup
		DeferCleanup(func() {
			select {
			case <-stop:
			default:
				close(stop)
			}
			flood.Wait()
		})
		var sent, refused, busy atomic.Int64
		start := time.Now()
		for w := range 4 {
			flood.Go(func() {
				defer GinkgoRecover()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					sent.Add(1)
					switch code := getFrom(flooder, g.url, fmt.Sprintf("flood-%d-%d", w, i)); code {
					case http.StatusTooManyRequests:
						busy.Add(1)
					case http.StatusUnauthorized:
						refused.Add(1)
					default:
						Fail(fmt.Sprintf("a random token answered %d", code))
					}
				}
			})
		}
		// The scraper's answer expires twice or more while the flood
		// lasts: it is reviewed again each time, whatever the flood.
		scrapes := from("127.0.0.1")
		Eventually(func(g2 Gomega) {
			g2.Expect(getFrom(scrapes, g.url, scraper)).To(Equal(http.StatusOK), "the scraper, during the flood")
			g2.Expect(g.reviewsOf(scraper)).To(BeNumerically(">=", 3))
		}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())
		Consistently(func() int {
			return getFrom(scrapes, g.url, scraper)
		}).WithTimeout(3 * opts.CacheTTL).WithPolling(200 * time.Millisecond).Should(Equal(http.StatusOK))

		By("a new scraper from 127.0.0.3 while the flood goes on")
		other, err := scrape.ReaderToken(ctx, env.Config, "default")
		Expect(err).NotTo(HaveOccurred())
		Eventually(func() int {
			return getFrom(from("127.0.0.3"), g.url, other)
		}).WithContext(ctx).WithTimeout(10 * time.Second).WithPolling(time.Second).Should(Equal(http.StatusOK))
		close(stop)
		flood.Wait()
		elapsed := time.Since(start)
		GinkgoWriter.Printf("MEASURED %d random tokens in %s from one address: %d answered 401, %d 429; %d TokenReviews in all, %d of the scraper's token\n",
			sent.Load(), elapsed.Round(time.Millisecond), refused.Load(), busy.Load(), g.reviews.Load(), g.reviewsOf(scraper))
		// The flood's reviews are bounded by its address's bound; the
		// scrapers' by one each per CacheTTL.
		floodBound := int64(opts.ReviewBurst) + int64(float64(opts.ReviewRate)*elapsed.Seconds()) + 1
		Expect(refused.Load()).To(BeNumerically("<=", floodBound))
		Expect(busy.Load()).To(BeNumerically(">", refused.Load()), "most of the flood answered 429")
		Expect(g.reviews.Load() - g.reviewsOf(scraper) - g.reviewsOf(other)).To(BeNumerically("<=", floodBound))
		Expect(g.errorLines()).To(BeEmpty())
	})

	It("keeps a refusal that came with an error for seconds only: the token is reviewed again then", func(ctx context.Context) {
		opts := testOptions
		opts.ErrorTTL = time.Second
		g := guard(env.Config, opts)
		token, err := scrape.ReaderToken(ctx, env.Config, "default")
		Expect(err).NotTo(HaveOccurred())
		// The API server's issuer, a signature that is not its own: a
		// refusal with its reason.
		parts := strings.Split(token, ".")
		Expect(parts).To(HaveLen(3))
		signature := []byte(parts[2])
		slices.Reverse(signature)
		tampered := parts[0] + "." + parts[1] + "." + string(signature)
		for range 3 {
			Expect(get(g.url, tampered)).To(Equal(http.StatusUnauthorized))
		}
		Expect(g.reviewsOf(tampered)).To(Equal(int64(1)), "kept for ErrorTTL")
		Eventually(func() int64 {
			Expect(get(g.url, tampered)).To(Equal(http.StatusUnauthorized))
			return g.reviewsOf(tampered)
		}).WithContext(ctx).WithTimeout(10 * time.Second).WithPolling(200 * time.Millisecond).Should(Equal(int64(2)))
		Expect(g.errorLines()).To(BeEmpty())
	})

	It("answers 503 while the API server cannot be asked, with one log line", func() {
		config := rest.CopyConfig(env.Config)
		config.Host = "https://127.0.0.1:1"
		g := guard(config, Options{CacheTTL: time.Minute, ReviewRate: rate.Inf, TotalReviewRate: rate.Inf, Known: 10, KnownFor: time.Hour, ErrorTTL: time.Second, ReviewTimeout: 5 * time.Second, LogEvery: time.Hour})
		for i := range 5 {
			Expect(get(g.url, fmt.Sprintf("token-%d", i))).To(Equal(http.StatusServiceUnavailable))
		}
		Expect(g.errorLines()).To(HaveLen(1))
	})
})
