"""Answers checked against their passages without an NLI model: lexical alignment of each sentence to the
passages (English stems, Chinese characters and pairs), numbers and names that must appear, the [n] citations;
and answers made of the passages' own sentences when no model answers or the model's answer is not supported."""
from .check import PARTLY_AT, SUPPORTED_AT, attach_citations, check_answer
from .extract import extractive_answer, supporting_quotes
from .labels import (LABELS, NOT_CHECKED, PARTLY, SUPPORTED, UNSUPPORTED, ExtractiveAnswer, Grounding,
                     SentenceGrounding)
from .refusal import says_not_covered
from .sentences import CITATION, cited_numbers, strip_citations, validate_citations

__all__ = ["CITATION", "LABELS", "NOT_CHECKED", "PARTLY", "PARTLY_AT", "SUPPORTED", "SUPPORTED_AT", "UNSUPPORTED",
           "ExtractiveAnswer", "Grounding", "SentenceGrounding", "attach_citations", "check_answer", "cited_numbers",
           "extractive_answer", "says_not_covered", "strip_citations", "supporting_quotes", "validate_citations"]
