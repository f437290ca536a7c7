; ctxdb recon: everything the indexer reads from a Python syntax tree, in one query.
;
; Loaded by name ("python") and compiled once per process (ctxdb/recon/extract.py).
; Capture order from tree-sitter is not stable between calls, so the extractor sorts
; every capture list by (start_byte, end_byte, capture name) before using it.
;
; Pairing rule the extractor relies on: the captures of a pattern's matches, each list
; sorted by start byte, line up one-to-one (a definition's name and colon come before
; any definition nested in its body). Patterns whose captures are paired so must not
; use alternations (see "local types" below); the extractor checks the lengths.

; --- definitions -----------------------------------------------------------
(function_definition
  name: (identifier) @function.name
  ":" @function.colon) @function.definition

(class_definition
  name: (identifier) @class.name
  ":" @class.colon) @class.definition

; A decorated definition's span (and signature) starts at its first decorator.
(decorated_definition
  definition: (_) @decorated.inner) @decorated.outer

; --- docstrings: a string that is the first statement of a module, class or def --
(module . (expression_statement . (string) @docstring.module))
(function_definition body: (block . (expression_statement . (string) @docstring.definition)))
(class_definition body: (block . (expression_statement . (string) @docstring.definition)))

; --- references ---------------------------------------------------------------
; base classes named by a (dotted) name; keyword arguments (metaclass=...) excluded
(class_definition
  superclasses: (argument_list [(identifier) (attribute)] @reference.base))

; the callee of a call; the extractor keeps dotted names and super().name
(call function: [(identifier) (attribute)] @reference.call)

; a bare decorator is a call of the decorator on the definition
(decorator [(identifier) (attribute)] @reference.decorator)

(import_statement) @import.plain
(import_from_statement) @import.from

; --- local types, so `x.method()` can resolve -----------------------------------
; No alternations ([...]) in these patterns: their captures are paired by position,
; and with an alternation tree-sitter 0.25's QueryCursor.captures also returns the
; first captures of a match that then fails (matches() does not).

; x = Class(...)
(assignment
  left: (identifier) @type.var
  right: (call function: (identifier) @type.var_class))
(assignment
  left: (identifier) @type.var
  right: (call function: (attribute) @type.var_class))

; def f(x: Class) / def f(x: Class = default)
(typed_parameter (identifier) @type.var type: (type (identifier) @type.var_class))
(typed_parameter (identifier) @type.var type: (type (attribute) @type.var_class))
(typed_default_parameter
  name: (identifier) @type.var type: (type (identifier) @type.var_class))
(typed_default_parameter
  name: (identifier) @type.var type: (type (attribute) @type.var_class))

; self.attr = Class(...)  /  self.attr = name (a typed parameter or typed local)
(assignment
  left: (attribute object: (identifier) @type.self attribute: (identifier) @type.attr)
  right: (call function: (identifier) @type.attr_class))
(assignment
  left: (attribute object: (identifier) @type.self attribute: (identifier) @type.attr)
  right: (call function: (attribute) @type.attr_class))
(assignment
  left: (attribute object: (identifier) @type.self attribute: (identifier) @type.attr)
  right: (identifier) @type.attr_class)
