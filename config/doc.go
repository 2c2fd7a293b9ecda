// Package config owns Weir's one configuration struct: defaults, loading
// from YAML (with every value's file:line:column), environment variables
// and flags, the job language's shapes (expressions, named aggregates,
// routes, job.streams), and validation that reports every problem by key
// path. It compiles no expression and runs nothing: the pipeline compiler
// reads the Job it returns.
package config

// The JSON Schema of the job file, and the chart's config.job schema, are
// generated from the types of this package.
//go:generate go run ../internal/tools/jobschema -root ..
