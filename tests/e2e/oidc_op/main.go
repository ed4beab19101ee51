// The e2e tests' OpenID Provider: zitadel/oidc's example OP (its login page, storage and provider, unchanged)
// served over HTTPS at an issuer URL the test chooses. The example's own main serves plain HTTP at
// http://localhost:PORT/, which no kube-apiserver accepts as an issuer; this main only sets the issuer,
// the TLS pair, the users and the one client.
//
// Environment: OIDC_ISSUER (https://127.0.0.1:PORT), OIDC_LISTEN (127.0.0.1:PORT), OIDC_TLS_CERT,
// OIDC_TLS_KEY, OIDC_USERS_FILE (the example storage's users JSON), OIDC_CLIENTS (confidential web clients,
// "id secret redirect-uri" per line).
package main

import (
	"log/slog"
	"net/http"
	"os"
	"strings"

	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"
)

func main() {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	for _, line := range strings.Split(os.Getenv("OIDC_CLIENTS"), "\n") {
		if fields := strings.Fields(line); len(fields) == 3 {
			storage.RegisterClients(storage.WebClient(fields[0], fields[1], fields[2]))
		}
	}
	users, err := storage.StoreFromFile(os.Getenv("OIDC_USERS_FILE"))
	if err != nil {
		logger.Error("cannot read the users", "error", err)
		os.Exit(1)
	}
	router := exampleop.SetupServer(os.Getenv("OIDC_ISSUER"), storage.NewStorage(users), logger, false)
	server := &http.Server{Addr: os.Getenv("OIDC_LISTEN"), Handler: router}
	logger.Info("issuer listening", "issuer", os.Getenv("OIDC_ISSUER"))
	if err := server.ListenAndServeTLS(os.Getenv("OIDC_TLS_CERT"), os.Getenv("OIDC_TLS_KEY")); err != http.ErrServerClosed {
		logger.Error("server terminated", "error", err)
		os.Exit(1)
	}
}
