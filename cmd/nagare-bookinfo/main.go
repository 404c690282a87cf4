// nagare-bookinfo is one service of the lab's Bookinfo-shaped application
// (pkg/lab/bookinfo): productpage, details, reviews (v1, v2, v3) or
// ratings, chosen by --role. The lab starts one per pod (seed2-sidecar).
package main

import (
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/nagare-net/nagare/pkg/lab/bookinfo"
)

func main() {
	var cfg bookinfo.Config
	listen := flag.String("listen", fmt.Sprintf(":%d", bookinfo.Port), "address to serve on")
	flag.StringVar(&cfg.Role, "role", "", "productpage, details, reviews or ratings")
	flag.IntVar(&cfg.Version, "version", 1, "reviews version: 1 (no ratings), 2 (black stars), 3 (red stars)")
	flag.StringVar(&cfg.Details, "details", "", "details base URL (productpage)")
	flag.StringVar(&cfg.Reviews, "reviews", "", "reviews base URL (productpage)")
	flag.StringVar(&cfg.Ratings, "ratings", "", "ratings base URL (reviews v2, v3)")
	flag.Parse()
	h, err := bookinfo.Handler(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "nagare-bookinfo:", err)
		os.Exit(2)
	}
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "nagare-bookinfo:", err)
		os.Exit(1)
	}
	// The lab waits for this line.
	fmt.Printf("nagare-bookinfo %s listening on %s\n", cfg.Role, l.Addr())
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second}
	if err := srv.Serve(l); err != nil {
		fmt.Fprintln(os.Stderr, "nagare-bookinfo:", err)
		os.Exit(1)
	}
}
