"""The one shared module of fakes for unit tests. Product code never imports it."""
