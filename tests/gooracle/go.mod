module nsqpy/tests/gooracle

go 1.19
