package catalogdb

// Selection is a catalog.Filter as SQL: the FROM clause that pages through
// it in ID order (a table, with an index hint where the dialect takes
// one), and its WHERE clause (" WHERE …", or "" for every entry) with
// the arguments of its `?` placeholders.
type Selection struct {
	From  string
	Where string
	Args  []any
}

// selectionOf turns a catalog.Filter into a Selection (LendSelection).
var selectionOf func(filter any, d Dialect) Selection

// LendSelection is called once, by package catalog's init, with the
// function that turns a catalog.Filter into its Selection. The packages
// layered on the catalog (redrive, rules) select entries with the
// store's filters in statements of their own; the catalog does not show
// its users that SQL, so it lends it here, inside the module.
func LendSelection(f func(filter any, d Dialect) Selection) { selectionOf = f }

// Select returns the Selection of filter, a catalog.Filter, in dialect d.
func Select(filter any, d Dialect) Selection { return selectionOf(filter, d) }
