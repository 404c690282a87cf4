package lab

import "testing"

// TestParseHAProxyRequests reads req_tot of a frontend from HAProxy's
// stats CSV (the columns as HAProxy 2.6 prints them, shortened).
func TestParseHAProxyRequests(t *testing.T) {
	page := "# pxname,svname,qcur,qmax,scur,smax,slim,stot,req_tot,status\n" +
		"redirected,FRONTEND,,,0,4,8000,117,466,OPEN\n" +
		"original,original,0,0,0,2,,117,,UP\n" +
		"health,FRONTEND,,,1,1,8000,3,3,OPEN\n"
	if n, err := ParseHAProxyRequests(page, "redirected"); err != nil || n != 466 {
		t.Errorf("redirected: %d %v, want 466", n, err)
	}
	if _, err := ParseHAProxyRequests(page, "nosuch"); err == nil {
		t.Error("a missing frontend parsed")
	}
	if _, err := ParseHAProxyRequests("<html>", "redirected"); err == nil {
		t.Error("a page that is not CSV parsed")
	}
}
