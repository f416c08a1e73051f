"""The widget view of a notebook's quiz: one box per question, feedback under each.

A thin view over ``Quiz.evaluate``: every state change goes through ``answer(question_id,
value)``, which a test (or a headless run) can call directly, as ipywidgets callbacks do. The view's
MIME bundle also carries the questions as ``text/html`` and a one-line ``text/plain``
(``gpumemlab.viz.static``), so an exported notebook keeps them instead of ``VBox(children=...)``.
"""
from __future__ import annotations
import html

from .checker import AnswerError, render_question


class QuizView:
    def __init__(self, quiz, bank):
        import ipywidgets as w

        self.quiz, self.bank, self.feedback, self.inputs = quiz, bank, {}, {}
        seed = quiz.progress().seed
        # the bank is a file anyone can edit: its title is text, never markup
        boxes = [w.HTML(f"<h3>Quiz {_escape(bank.notebook)}: {_escape(bank.title)}</h3>")]

        for q in bank.questions:
            text = render_question(q, seed)
            prompt = w.HTML("<pre style='white-space:pre-wrap'>" + _escape(text) + "</pre>")
            if q.kind == "choice":
                letters = "abcdefgh"[:len(q.data["options"])]
                field = w.RadioButtons(options=list(letters), value=None)
            elif q.kind == "code":
                field = w.Label("Answer in code: gml.quiz.check(%r, your_function)" % q.id)
            else:
                field = w.Text(placeholder="your answer")
            button = w.Button(description="Check")
            out = w.HTML()
            button.on_click(lambda _b, qid=q.id, f=field: self.answer(qid, f.value))
            self.feedback[q.id], self.inputs[q.id] = out, field
            boxes.append(w.VBox([prompt, field] + ([button] if q.kind != "code" else []) + [out]))
        self.score = w.HTML()
        self._update_score()
        self.widget = w.VBox(boxes + [self.score])

    def answer(self, question_id, value):

        try:
            result = self.quiz.evaluate(question_id, value, record=True)
            text = result.text
        except AnswerError as exc:
            text = f"? {exc}"
        self.feedback[question_id].value = "<pre style='white-space:pre-wrap'>" + \
            _escape(text) + "</pre>"
        self._update_score()
        return text

    def _update_score(self):
        progress = self.quiz.progress()
        got = sum(progress.entry(q.id)["points"] for q in self.bank.questions)
        total = sum(q.points for q in self.bank.questions)
        self.score.value = f"<b>score: {got:g} / {total:g}</b>"

    def display(self):
        from IPython.display import display

        display(self)

    def _repr_mimebundle_(self, **kwargs):
        from gpumemlab.viz.static import widget_bundle

        bank = self.bank
        text = self.quiz.text(bank.notebook)
        head = (f"Quiz {bank.notebook}: {bank.title} ({len(bank.questions)} questions; "
                f"answer with gml.quiz.check)")
        return widget_bundle(self.widget, "<pre style='white-space:pre-wrap'>" + _escape(text) +
                             "</pre>", head)

    def __repr__(self):
        return f"<quiz {self.bank.notebook}: {self.bank.title}>"


def _escape(text: str) -> str:

    return html.escape(text)
