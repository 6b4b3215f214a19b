package handlers

// SetBeforeBegin makes h run f just before each attempt's begin statement.
func SetBeforeBegin(h *Handler, f func()) { h.beforeBegin = f }
