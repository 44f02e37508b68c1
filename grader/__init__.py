"""The Module 9 autograder: stubs from solutions, hidden tests in a trusted judge, student code in a
sandboxed worker."""
