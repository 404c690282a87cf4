// Package bookinfo is an application with the shape of Istio's Bookinfo
// sample, the one seed 002 measured with and without sidecar proxies:
// productpage calls details and then reviews; reviews comes in three
// versions behind one Service, and v2 and v3 call ratings (v1 shows no
// stars). The real images (Python, Ruby, Java, Node.js) cannot be pulled
// here, so each service is a small Go handler of our own with the same
// call graph, the same JSON documents and a product page of Bookinfo's
// size. One binary (cmd/nagare-bookinfo) plays every role.
//
// As in Bookinfo, every call to another service opens a new connection
// (productpage uses Python requests without a session, reviews a new JAX-RS
// client per call): each call is a new connection through the callee's
// Service, which is what a Service proxy and a sidecar see.
package bookinfo

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net/http"
	"strings"
	"time"
)

// Roles of the application.
const (
	RoleProductPage = "productpage"
	RoleDetails     = "details"
	RoleReviews     = "reviews"
	RoleRatings     = "ratings"
)

// Roles lists every role, callers first.
var Roles = []string{RoleProductPage, RoleDetails, RoleReviews, RoleRatings}

// Port is Bookinfo's: every service listens on 9080.
const Port = 9080

// ProductPageBytes is the size of the product page's HTML. Bookinfo's
// template (samples/bookinfo/src/productpage/templates/productpage.html,
// 5531 characters before rendering) renders to about that with the two
// reviews and their stars; the page here is filled to exactly this many
// bytes, whatever the reviews' version, so every request moves the same
// payload.
const ProductPageBytes = 5500

// Config is one service's role and where it finds the services it calls.
type Config struct {
	Role string
	// Version of reviews: 1 (no ratings), 2 (black stars), 3 (red stars).
	Version int
	// Details, Reviews, Ratings are the base URLs of the called services
	// (http://<ClusterIP>:9080).
	Details, Reviews, Ratings string
	// Timeout bounds each call to another service (default 5 s).
	Timeout time.Duration
}

// Details is the details service's document (Bookinfo's, field for field).
type Details struct {
	ID        int    `json:"id"`
	Author    string `json:"author"`
	Year      int    `json:"year"`
	Type      string `json:"type"`
	Pages     int    `json:"pages"`
	Publisher string `json:"publisher"`
	Language  string `json:"language"`
	ISBN10    string `json:"ISBN-10"`
	ISBN13    string `json:"ISBN-13"`
}

// Reviews is the reviews service's document.
type Reviews struct {
	ID      string   `json:"id"`
	Version string   `json:"podname"`
	Reviews []Review `json:"reviews"`
}

// Review is one review; Rating is set by reviews v2 and v3 only.
type Review struct {
	Reviewer string  `json:"reviewer"`
	Text     string  `json:"text"`
	Rating   *Rating `json:"rating,omitempty"`
}

// Rating is a review's stars, black (v2) or red (v3).
type Rating struct {
	Stars int    `json:"stars"`
	Color string `json:"color"`
}

// Ratings is the ratings service's document.
type Ratings struct {
	ID      int            `json:"id"`
	Ratings map[string]int `json:"ratings"`
}

var (
	theDetails = Details{ID: 0, Author: "William Shakespeare", Year: 1595, Type: "paperback", Pages: 200,
		Publisher: "PublisherA", Language: "English", ISBN10: "1234567890", ISBN13: "123-1234567890"}
	theReviews = []Review{
		{Reviewer: "Reviewer1", Text: "An extremely entertaining play by Shakespeare. The slapstick humour is refreshing!"},
		{Reviewer: "Reviewer2", Text: "Absolutely fun and entertaining. The play lacks thematic depth when compared to other plays by Shakespeare."},
	}
	theRatings = Ratings{ID: 0, Ratings: map[string]int{"Reviewer1": 5, "Reviewer2": 4}}
)

// Handler serves cfg's role: GET /productpage, /details/0, /reviews/0,
// /ratings/0, and /health on every role.
func Handler(cfg Config) (http.Handler, error) {
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	// A new connection per call, as Bookinfo's services make them.
	client := &http.Client{Timeout: cfg.Timeout, Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}}
	mux := http.NewServeMux()
	mux.HandleFunc("/health", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	switch cfg.Role {
	case RoleProductPage:
		if cfg.Details == "" || cfg.Reviews == "" {
			return nil, fmt.Errorf("productpage needs the details and reviews URLs")
		}
		mux.HandleFunc("/productpage", func(w http.ResponseWriter, r *http.Request) {
			var d Details
			if err := getJSON(client, cfg.Details+"/details/0", &d); err != nil {
				http.Error(w, "details: "+err.Error(), http.StatusBadGateway)
				return
			}
			var rv Reviews
			if err := getJSON(client, cfg.Reviews+"/reviews/0", &rv); err != nil {
				http.Error(w, "reviews: "+err.Error(), http.StatusBadGateway)
				return
			}
			page := ProductPage(d, rv)
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.Header().Set("X-Reviews-Version", rv.Version)
			w.Write(page)
		})
	case RoleDetails:
		mux.HandleFunc("/details/", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, theDetails) })
	case RoleReviews:
		if cfg.Version < 1 || cfg.Version > 3 {
			return nil, fmt.Errorf("reviews version %d, want 1, 2 or 3", cfg.Version)
		}
		if cfg.Version > 1 && cfg.Ratings == "" {
			return nil, fmt.Errorf("reviews v%d needs the ratings URL", cfg.Version)
		}
		mux.HandleFunc("/reviews/", func(w http.ResponseWriter, _ *http.Request) {
			rv := Reviews{ID: "0", Version: fmt.Sprintf("reviews-v%d", cfg.Version), Reviews: append([]Review(nil), theReviews...)}
			if cfg.Version > 1 {
				var rt Ratings
				if err := getJSON(client, cfg.Ratings+"/ratings/0", &rt); err != nil {
					http.Error(w, "ratings: "+err.Error(), http.StatusBadGateway)
					return
				}
				color := map[int]string{2: "black", 3: "red"}[cfg.Version]
				for i := range rv.Reviews {
					rv.Reviews[i].Rating = &Rating{Stars: rt.Ratings[rv.Reviews[i].Reviewer], Color: color}
				}
			}
			writeJSON(w, rv)
		})
	case RoleRatings:
		mux.HandleFunc("/ratings/", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, theRatings) })
	default:
		return nil, fmt.Errorf("role %q, want one of %s", cfg.Role, strings.Join(Roles, ", "))
	}
	return mux, nil
}

func getJSON(c *http.Client, url string, v any) error {
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return json.Unmarshal(body, v)
}

func writeJSON(w http.ResponseWriter, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.Write(b)
}

// ProductPage renders the page: the book's summary, its details, the
// reviews with their stars (if rated), filled with an HTML comment to
// ProductPageBytes.
func ProductPage(d Details, rv Reviews) []byte {
	var b bytes.Buffer
	e := html.EscapeString
	b.WriteString(`<!DOCTYPE html>
<html><head><meta charset="utf-8"><meta http-equiv="X-UA-Compatible" content="IE=edge">
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<title>Simple Bookstore App</title>
<link rel="stylesheet" href="static/bootstrap/css/bootstrap.min.css">
<link rel="stylesheet" href="static/bootstrap/css/bootstrap-theme.min.css">
</head><body>
<nav class="navbar navbar-inverse navbar-static-top"><div class="container">
<div class="navbar-header"><a class="navbar-brand" href="#">BookInfo Sample</a></div>
<button type="button" class="btn btn-default navbar-btn navbar-right" data-toggle="modal" href="#login-modal">Sign in</button>
</div></nav>
<div class="container-fluid"><div class="row"><div class="col-md-12">
<h3 class="text-center text-primary">The Comedy of Errors</h3>
<p>Summary: <a href="https://en.wikipedia.org/wiki/The_Comedy_of_Errors">Wikipedia Summary</a>: The Comedy of Errors is one of <b>William Shakespeare's</b> early plays. It is his shortest and one of his most farcical comedies, with a major part of the humour coming from slapstick and mistaken identity, in addition to puns and word play.</p>
</div></div>
<div class="row"><div class="col-md-6">
<h4 class="text-center text-primary">Book Details</h4>
<dl>
`)
	fmt.Fprintf(&b, "<dt>Type:</dt>%s\n<dt>Pages:</dt>%d\n<dt>Publisher:</dt>%s\n<dt>Language:</dt>%s\n<dt>ISBN-10:</dt>%s\n<dt>ISBN-13:</dt>%s\n</dl>\n</div>\n",
		e(d.Type), d.Pages, e(d.Publisher), e(d.Language), e(d.ISBN10), e(d.ISBN13))
	b.WriteString(`<div class="col-md-6"><h4 class="text-center text-primary">Book Reviews</h4>` + "\n")
	for _, r := range rv.Reviews {
		fmt.Fprintf(&b, "<blockquote>\n<p>%s</p>\n<small>%s</small>\n", e(r.Text), e(r.Reviewer))
		if r.Rating != nil {
			fmt.Fprintf(&b, "<font color=\"%s\">\n", e(r.Rating.Color))
			for n := 0; n < 5; n++ {
				star := "glyphicon-star"
				if n >= r.Rating.Stars {
					star = "glyphicon-star-empty"
				}
				fmt.Fprintf(&b, "<span class=\"glyphicon %s\"></span>\n", star)
			}
			b.WriteString("</font>\n")
		}
		b.WriteString("</blockquote>\n")
	}
	b.WriteString("</div></div></div>\n")
	const tail = "</body></html>\n"
	if fill := ProductPageBytes - b.Len() - len(tail) - len("<!--  -->\n"); fill > 0 {
		b.WriteString("<!-- " + strings.Repeat("x", fill) + " -->\n")
	}
	b.WriteString(tail)
	return b.Bytes()
}
