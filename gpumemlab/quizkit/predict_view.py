"""The widget of a predict cell: the question, a text box (or choice buttons), a Save button and a
one-line answer under it (Enter in the box saves, as the button does). Every change goes through ``Predictions.record``, which a test can call
directly as the callbacks do. Its MIME bundle carries the question as ``text/html`` and
``text/plain`` too (``gpumemlab.viz.static``), so an exported notebook still shows it.
"""
from __future__ import annotations

from gpumemlab.viz.static import escape, pre, widget_bundle


class PredictView:
    def __init__(self, predictions, spec):
        import ipywidgets as w

        self.predictions, self.spec = predictions, spec
        entry = predictions.progress().prediction(spec.id) or {}
        self.prompt = w.HTML(f"<b>Predict {escape(spec.id)}</b>: {escape(spec.question)}")
        if spec.kind == "choice":
            value = entry.get("value") if entry.get("value") in spec.choices else None
            self.field = w.RadioButtons(options=list(spec.choices), value=value)
        else:
            placeholder = ("a size, with its unit (KiB, MiB, GiB) or in bytes"
                           if spec.kind == "size" else "a number")
            self.field = w.Text(value=entry.get("text", ""), placeholder=placeholder,
                                continuous_update=False)
        self.button = w.Button(description="Save prediction")
        self.feedback = w.HTML()
        self.button.on_click(lambda _b: self.submit(self.field.value))
        # Enter in the text box saves too (continuous_update=False: the value changes on Enter
        # or on leaving the box, not on each key); a choice saves when picked.
        self.field.observe(lambda change: self.submit(change["new"]), names="value")
        if entry.get("value") is not None:
            self.feedback.value = pre(predictions.text(spec.id).splitlines()[-1])
        self.widget = w.VBox([self.prompt, w.HBox([self.field, self.button]), self.feedback])

    def submit(self, value) -> str:
        text = self.predictions.record(self.spec.id, "" if value is None else value)
        self.feedback.value = pre(text)
        return text

    def _repr_mimebundle_(self, **kwargs):
        text = self.predictions.text(self.spec.id)
        return widget_bundle(self.widget, pre(text), text.splitlines()[0])

    def __repr__(self):
        return f"<prediction {self.spec.id}: {self.spec.question}>"
