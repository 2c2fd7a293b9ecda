// Package config owns Weir's one configuration struct: defaults, validation
// that reports every problem by key path, and loading from YAML, environment
// variables and flags with viper.
package config
