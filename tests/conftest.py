"""Suite-wide setup. There is no known-failure list: a failing test is fixed, not marked."""
