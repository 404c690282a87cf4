package bookinfo

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func serve(t *testing.T, cfg Config) string {
	t.Helper()
	h, err := Handler(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s.URL
}

// TestCallGraph runs the four roles on loopback: the product page is
// ProductPageBytes long, shows the details, and shows stars only from
// reviews v2 (black) and v3 (red).
func TestCallGraph(t *testing.T) {
	ratings := serve(t, Config{Role: RoleRatings})
	details := serve(t, Config{Role: RoleDetails})
	for v, want := range map[int]string{1: "", 2: `color="black"`, 3: `color="red"`} {
		reviews := serve(t, Config{Role: RoleReviews, Version: v, Ratings: ratings})
		pp := serve(t, Config{Role: RoleProductPage, Details: details, Reviews: reviews})
		resp, err := http.Get(pp + "/productpage")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("v%d: %s: %s", v, resp.Status, body)
		}
		page := string(body)
		if len(body) != ProductPageBytes {
			t.Errorf("v%d: page is %d bytes, want %d", v, len(body), ProductPageBytes)
		}
		if !strings.Contains(page, "<dt>ISBN-13:</dt>123-1234567890") {
			t.Errorf("v%d: no details on the page", v)
		}
		stars := strings.Count(page, `"glyphicon glyphicon-star"`)
		if want == "" && (stars != 0 || strings.Contains(page, "<font")) {
			t.Errorf("v1: %d stars, want none", stars)
		}
		if want != "" && (!strings.Contains(page, want) || stars != 5+4) {
			t.Errorf("v%d: %d full stars (want 9, Reviewer1 5 + Reviewer2 4), color %s in page: %v", v, stars, want, strings.Contains(page, want))
		}
		if got := resp.Header.Get("X-Reviews-Version"); got != "reviews-v"+string(rune('0'+v)) {
			t.Errorf("v%d: X-Reviews-Version %q", v, got)
		}
	}
}

// TestBackendDown: a missing service is a 502, not a page, so the load
// tool counts it as an error.
func TestBackendDown(t *testing.T) {
	dead := httptest.NewServer(http.NotFoundHandler())
	url := dead.URL
	dead.Close()
	pp := serve(t, Config{Role: RoleProductPage, Details: url, Reviews: url})
	resp, err := http.Get(pp + "/productpage")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("status %s, want 502", resp.Status)
	}
	if _, err := Handler(Config{Role: RoleReviews, Version: 2}); err == nil {
		t.Error("reviews v2 without a ratings URL accepted")
	}
	if _, err := Handler(Config{Role: "cart"}); err == nil {
		t.Error("unknown role accepted")
	}
}
