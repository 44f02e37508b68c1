"""The public suites: no reference, no mistake variants; they ship to students for `grader check`."""
