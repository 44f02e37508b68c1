"""What only instructors run: grading a class (runner, grade_all, classroom, gradebook, similarity,
audit and its corpus), the Gradescope bundle (autograder, gradescope) and the student release
(release, notebook). Nothing here changes a grade (grader_version leaves it out), and the student
release ships none of it."""
from pathlib import Path

INSTRUCTOR_PATH = Path("grader/instructor")
"""This package, relative to the repository (or site-packages)."""
