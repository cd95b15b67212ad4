package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/spf13/cobra"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/transport/sqlite"
)

// storeFlags are the flags of every command that reads or writes the
// embedded store: --db PATH, or --config FILE whose db field names it.
type storeFlags struct {
	db     string
	config string
}

func (f *storeFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.db, "db", "", "path of the embedded SQLite database (overrides the config's db)")
	cmd.Flags().StringVar(&f.config, "config", "", "Lily configuration file (TOML)")
}

// loadConfig returns the configuration of --config, or an empty one.
func (f *storeFlags) loadConfig() (config.Config, error) {
	if f.config == "" {
		return config.Config{}.WithDefaults(), nil
	}
	return config.LoadConfig(f.config)
}

// path resolves the database path: --db, else the config's db.
func (f *storeFlags) path() (string, error) {
	if f.db != "" {
		return f.db, nil
	}
	if f.config == "" {
		return "", usagef("no database given: pass --db PATH (the file your consumers or 'lily demo --db PATH' use) or --config FILE")
	}
	c, err := f.loadConfig()
	if err != nil {
		return "", err
	}
	return c.DB, nil
}

// openExisting opens the SQLite transport and its catalog on an existing
// database; it never creates a new file (a typo would otherwise report an
// empty, perfectly balanced ledger).
func (f *storeFlags) openExisting(ctx context.Context) (*sqlite.Transport, *catalog.Store, error) {
	path, err := f.path()
	if err != nil {
		return nil, nil, err
	}
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil, nil, usagef("--db %s: no such database file (give the path your consumers use, or create one with 'lily demo --db %s')", path, path)
	}
	tr, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		return nil, nil, err
	}
	cat, err := catalog.New(ctx, tr.DB())
	if err != nil {
		tr.Close()
		return nil, nil, fmt.Errorf("open catalog in %s: %w", path, err)
	}
	return tr, cat, nil
}
