"""What one test produced: the data the judge hands to scoring and the reports."""
from dataclasses import dataclass

from .spec import Status


@dataclass
class Result:
    name: str
    component: str
    score: float
    max_score: float
    status: Status
    message: str

    def to_json(self) -> dict:
        return {**vars(self), "status": self.status.value}
