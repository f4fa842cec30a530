/* Inside Airflow's UI this page is an iframe sandboxed with "allow-scripts allow-same-origin allow-forms
   allow-downloads" (Airflow 3.3): the frame may navigate itself and post forms, but not the Airflow window
   (no allow-top-navigation) and not open tabs (no allow-popups). Links to Airflow's own pages (a DAG run)
   carry target="_top"; inside the frame a click on one is followed by a link in Airflow's own document, so
   the Airflow window navigates, as its own link would. Standalone, or without JavaScript, the link works as
   it is. Nothing else on the page needs this script. */
(function () {
  var framed = false;
  try { framed = window.top !== window.self && !!window.top.document; } catch (e) { framed = false; }
  if (!framed) return;
  document.documentElement.setAttribute("data-embedded", "airflow");
  document.addEventListener("click", function (event) {
    var link = event.target.closest ? event.target.closest("a[target=_top]") : null;
    if (!link || event.defaultPrevented || event.button !== 0 || event.ctrlKey || event.metaKey) return;
    event.preventDefault();
    var outer = window.top.document.createElement("a");
    outer.href = link.href;
    outer.style.display = "none";
    window.top.document.body.appendChild(outer);
    outer.click();
    outer.remove();
  });
})();
