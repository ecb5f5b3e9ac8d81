// The operator's configuration forms (agents/config_views.py) and the grounding documents' forms.
// Both are conveniences: without JavaScript each form has blank rows to add with, and the server
// answers a form too large to read with the form and a message (parley/middleware.py).
//
// "Add a …" (button.add-row[data-rows=<prefix>]) appends the formset's empty row, from the
// <template id="<prefix>-new">, numbered, counts it in <prefix>-TOTAL_FORMS and moves the focus
// to its first field; at the formset's most rows (data-max) the button goes.
//
// A form with data-max-bytes is not sent when its body would be larger than that
// (DATA_UPLOAD_MAX_MEMORY_SIZE, past which the server cannot read it): the form says how large
// it is, which field is the largest, and keeps everything typed; the focus goes to that field.
(function () {
  "use strict";

  function megabytes(bytes) {
    // As Django's filesizeformat writes it, so the page and the server name the limit alike.
    return (bytes / 1048576).toFixed(1) + "\u00a0MB";
  }

  function encodedSize(name, value) {
    return new URLSearchParams([[name, value]]).toString().length + 1; // the "&" between fields
  }

  function labelOf(field) {
    const label = field.labels && field.labels[0];
    return label ? label.textContent.replace(/:\s*$/, "").trim() : field.name;
  }

  document.querySelectorAll("button.add-row[data-rows]").forEach(function (button) {
    const prefix = button.dataset.rows;
    const list = document.getElementById(prefix + "-rows");
    const template = document.getElementById(prefix + "-new");
    const total = document.getElementById("id_" + prefix + "-TOTAL_FORMS");
    const most = Number(button.dataset.max);
    if (!list || !template || !total) {
      return;
    }
    button.hidden = Number(total.value) >= most;
    button.addEventListener("click", function () {
      const index = Number(total.value);
      if (index >= most) {
        return;
      }
      const row = template.content.firstElementChild.cloneNode(true);
      row.querySelectorAll("[id], [for], [name], [aria-describedby]").forEach(function (element) {
        ["id", "for", "name", "aria-describedby"].forEach(function (attribute) {
          const value = element.getAttribute(attribute);
          if (value !== null) {
            element.setAttribute(attribute, value.replaceAll("__prefix__", String(index)));
          }
        });
      });
      const legend = row.querySelector("legend");
      if (legend) {
        legend.textContent = legend.textContent.replace("__num__", String(index + 1));
      }
      list.appendChild(row);
      total.value = String(index + 1);
      button.hidden = index + 1 >= most;
      const first = row.querySelector("input:not([type=hidden]), select, textarea");
      if (first) {
        first.focus();
      }
    });
  });

  document.querySelectorAll("form[data-max-bytes]").forEach(function (form) {
    const limit = Number(form.dataset.maxBytes);
    if (!limit) {
      return;
    }
    form.addEventListener("submit", function (event) {
      let size = 0;
      let largest = null;
      let largestSize = 0;
      for (const [name, value] of new FormData(form)) {
        if (typeof value === "string") {
          size += encodedSize(name, value);
        }
      }
      if (size <= limit) {
        return;
      }
      event.preventDefault();
      for (const field of form.elements) {
        if (field.name && typeof field.value === "string") {
          const fieldSize = encodedSize(field.name, field.value);
          if (fieldSize > largestSize) {
            largest = field;
            largestSize = fieldSize;
          }
        }
      }
      let alert = document.getElementById("too-large");
      if (!alert) {
        alert = document.createElement("div");
        alert.id = "too-large";
        alert.className = "form-error";
        alert.setAttribute("role", "alert");
        form.insertBefore(alert, form.querySelector("fieldset"));
      }
      const text = document.createElement("p");
      text.textContent =
        "Not sent: this form is " + megabytes(size) + ", more than the " + megabytes(limit) +
        " a form may send." +
        (largest ? " The largest field is " + labelOf(largest) + " (" + megabytes(largestSize) + "): shorten it and save again." : "") +
        " Nothing you typed is lost.";
      alert.replaceChildren(text);
      if (largest) {
        largest.focus();
      }
    });
  });
})();
